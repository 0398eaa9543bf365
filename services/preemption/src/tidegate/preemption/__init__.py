"""Selects and evicts victim training gangs for inference."""
