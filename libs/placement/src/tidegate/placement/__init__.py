"""Topology-aware gang placement: pure, typed, no I/O."""
