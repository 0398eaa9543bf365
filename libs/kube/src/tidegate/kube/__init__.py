"""Kubernetes adapter: the only importer of kubernetes_asyncio."""
