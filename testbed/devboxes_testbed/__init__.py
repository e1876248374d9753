"""A real local Kubernetes control plane with simulated GPU nodes, for development and tests."""

# The default GPU profile of testbed/settings.yaml, which is also the name and the
# ``accelerator`` label of the node pool it schedules on (testbed/nodes.yaml).
L4 = "nvidia-l4"
