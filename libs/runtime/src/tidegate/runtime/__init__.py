"""Service lifecycle: settings, supervised tasks, health and metrics."""
