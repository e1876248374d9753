"""The edge to Kubernetes: the API client and its errors, the leader Lease, the apiserver
probe, and timestamps as Kubernetes writes them."""
