"""A simulated Kubernetes cluster that speaks the Kubernetes HTTP API."""
