"""Keeps free capacity per node and topology domain."""
