"""OpenTelemetry tracing and JSON logging for tidegate."""
