"""A real local Kubernetes control plane with simulated GPU nodes, for development and tests."""

# The GPU profiles of testbed/settings.yaml, the example settings tests, benchmarks and
# `make up` run with. L4 is the default; it and ROCM also name the node pool they schedule
# on and its ``accelerator`` label (testbed/nodes.yaml), L4_SHARED the time-sliced L4 pool.
L4 = "nvidia-l4"
L4_SHARED = "nvidia-l4-shared"
MIG = "nvidia-a100-mig-1g10gb"
ROCM = "amd-rocm"
