"""Kubernetes names tidegate itself defines, in one place for every package that uses them."""

from typing import Final

ADMISSION_GATE: Final = "tidegate.io/admission"
"""The scheduling gate that holds a managed pod until admission has placed it."""
