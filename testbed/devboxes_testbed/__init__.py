"""A real local Kubernetes control plane with simulated GPU nodes, for development and tests."""
