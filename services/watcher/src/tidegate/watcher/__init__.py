"""Mirrors Kubernetes objects onto the bus."""
