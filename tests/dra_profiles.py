"""DRA GPU profiles the tests share, written as an operator writes them in values.yaml,
for the devices of testbed/nodes-dra.yaml."""

from __future__ import annotations

from typing import Any

NVIDIA = "gpu.nvidia.com"
AMD = "gpu.amd.com"
PRODUCT = f"device.attributes['{NVIDIA}'].productName"
MEMORY = f"device.capacity['{NVIDIA}'].memory"
IS_H100 = f"has({PRODUCT}) && {PRODUCT}.startsWith('NVIDIA H100')"
IS_A100 = f"has({PRODUCT}) && {PRODUCT}.startsWith('NVIDIA A100')"
AT_LEAST_40G = f"has({MEMORY}) && {MEMORY}.compareTo(quantity('40Gi')) >= 0"

H100_OR_A100: dict[str, Any] = {
    "name": "h100-or-a100",
    "displayName": "NVIDIA H100 or A100",
    "deviceClassName": NVIDIA,
    "selectors": [IS_H100],
    "count": 1,
    "alternatives": [{"deviceClassName": NVIDIA, "selectors": [IS_A100], "count": 1}],
    "devices": "NVIDIA H100 80GB, else A100 40GB",
}
GPU_40G: dict[str, Any] = {
    "name": "gpu-40g",
    "displayName": "Any NVIDIA GPU with 40 GiB",
    "deviceClassName": NVIDIA,
    "selectors": [AT_LEAST_40G],
    "count": 1,
}
MI300X: dict[str, Any] = {
    "name": "mi300x",
    "displayName": "AMD Instinct MI300X",
    "deviceClassName": AMD,
    "count": 1,
}
DRA_PROFILES = [H100_OR_A100, GPU_40G, MI300X]
