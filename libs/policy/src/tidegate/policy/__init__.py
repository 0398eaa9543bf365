"""Queue quotas, card quotas and tidal victim selection: pure, typed, no I/O."""
