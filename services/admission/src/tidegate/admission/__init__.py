"""Decides which workloads are admitted and where."""
