"""Releases gated pods onto their assigned domains."""
