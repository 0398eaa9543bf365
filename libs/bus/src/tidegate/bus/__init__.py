"""NATS JetStream adapter: the only importer of nats."""
