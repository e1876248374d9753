"""Free devices of DRA profiles, counted from plain ResourceSlices, claims and classes."""

from __future__ import annotations

from typing import Any

from devboxes_controller.config.gpu import GpuProfileConfig
from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.placement import devices
from dra_profiles import AT_LEAST_40G, GPU_40G, H100_OR_A100, IS_A100, IS_H100, NVIDIA

from devboxes_sdk.models import ProfileAvailability

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"
L4 = "NVIDIA L4"
MEMORY = {H100: "80Gi", A100: "40Gi", L4: "24Gi"}
NVIDIA_CLASS = devices.strip_device_class(
    {
        "metadata": {"name": NVIDIA, "creationTimestamp": "2030-01-01T00:00:00Z"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f"device.driver == '{NVIDIA}' && "
                        f"device.attributes['{NVIDIA}'].type == 'gpu'"
                    }
                }
            ],
            "extendedResourceName": "nvidia.com/gpu",
        },
    }
)
CLASSES = {NVIDIA: NVIDIA_CLASS}


def gpu(name: str, product: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": product},
            "cudaComputeCapability": {"version": "9.0.0"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
        },
        "capacity": {"memory": {"value": MEMORY[product]}},
        **extra,
    }


def resource_slice(
    node: str, *devices_: dict[str, Any], generation: int = 1, **spec: Any
) -> dict[str, Any]:
    return devices.strip_slice(
        {
            "metadata": {"name": f"{node}-{NVIDIA}-{generation}", "resourceVersion": "1"},
            "spec": {
                "driver": NVIDIA,
                "nodeName": node,
                "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                "devices": list(devices_),
                **spec,
            },
        }
    )


def claim(*held: tuple[str, str], admin: bool = False) -> dict[str, Any]:
    results = [
        {"request": "gpu", "driver": NVIDIA, "pool": pool, "device": device, "adminAccess": admin}
        for pool, device in held
    ]
    return devices.strip_claim(
        {
            "metadata": {"name": "c", "namespace": "elsewhere", "resourceVersion": "1"},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    )


def guarded(path: str, test: str) -> str:
    """A selector reading ``path`` as profiles must: guarded by has()."""
    return f"has({path}) && {path}{test}"


def profile(data: dict[str, Any]) -> GpuProfileConfig:
    settings = settings_from_mapping(
        {"gpu": {"enabled": True, "defaultProfile": data["name"], "profiles": [data]}}
    )
    return settings.gpu.profiles[0]


CLUSTER = [
    resource_slice("h", gpu("gpu-0", H100), gpu("gpu-1", H100)),
    resource_slice("a", gpu("gpu-0", A100), gpu("gpu-1", A100)),
    resource_slice("l", gpu("gpu-0", L4), gpu("gpu-1", L4)),
]


def entry(
    data: dict[str, Any],
    slices: list[dict[str, Any]],
    claims: list[dict[str, Any]] = [],  # noqa: B006 - never changed
    classes: dict[str, Any] = CLASSES,
    nodes: devices.Nodes | None = None,
) -> tuple[Any, list[devices.ChoiceCount]]:
    counts = devices.count_profile(
        profile(data),
        devices.inventory(slices),
        devices.held_devices(claims),
        classes,
        nodes,
        devices.Matcher(),
    )
    return devices.profile_entry(data["name"], counts, 0), counts


def test_free_devices_are_the_matching_ones_no_claim_holds() -> None:
    found, _ = entry(GPU_40G, CLUSTER, [claim(("h", "gpu-1"))])
    # H100s and A100s have 40 GiB or more (quantity comparison); L4s do not.
    assert (found.available, found.capacity, found.reason) == (3, 4, None)
    found, _ = entry(GPU_40G, CLUSTER, [claim(("h", "gpu-0"), ("h", "gpu-1"), ("a", "gpu-0"))])
    assert (found.available, found.capacity) == (1, 4)


def test_admin_access_takes_no_device() -> None:
    found, _ = entry(GPU_40G, CLUSTER, [claim(("h", "gpu-1"), admin=True)])
    assert found.available == 4


def test_a_box_takes_its_count_on_one_node() -> None:
    two = {**GPU_40G, "name": "two", "count": 2}
    found, _ = entry(two, CLUSTER, [claim(("h", "gpu-0"))])
    # h has one free H100 left, a has two A100s: one box of two fits.
    assert (found.available, found.capacity) == (1, 2)


def test_nodes_the_profile_may_not_run_on_do_not_count() -> None:
    found, _ = entry(GPU_40G, CLUSTER, nodes={"a": devices.Room(), "l": devices.Room()})
    assert (found.available, found.capacity) == (2, 2)


def test_first_available_reports_the_first_choice_with_a_free_device() -> None:
    found, counts = entry(H100_OR_A100, CLUSTER)
    assert [(c.available, c.capacity) for c in counts] == [(2, 2), (2, 2)]
    assert (found.available, found.capacity) == (2, 2)
    all_h100 = claim(("h", "gpu-0"), ("h", "gpu-1"))
    found, counts = entry(H100_OR_A100, CLUSTER, [all_h100])
    assert [c.available for c in counts] == [0, 2]
    assert (found.available, found.capacity) == (2, 2)
    every = claim(("h", "gpu-0"), ("h", "gpu-1"), ("a", "gpu-0"), ("a", "gpu-1"))
    found, _ = entry(H100_OR_A100, CLUSTER, [every])
    assert (found.available, found.capacity, found.reason) == (0, 2, None)


def test_no_matching_device_and_a_missing_class_say_so() -> None:
    found, _ = entry(H100_OR_A100, CLUSTER[2:])
    assert (found.available, found.capacity, found.reason) == (0, 0, devices.NO_DEVICE)
    found, _ = entry(GPU_40G, CLUSTER, classes={})
    assert found.reason == devices.NO_CLASS.format(name=NVIDIA)


def test_a_selector_the_controller_cannot_evaluate_leaves_the_count_unknown() -> None:
    unknown = {
        **GPU_40G,
        "name": "odd",
        "selectors": [
            guarded(f"device.attributes['{NVIDIA}'].productName", ".lowerAscii() == 'x'")
        ],
    }
    found, counts = entry(unknown, CLUSTER)
    assert (found.available, found.capacity, found.reason) == (None, None, devices.UNKNOWN)
    assert counts[0].unjudged


def test_version_attributes_compare_as_semver() -> None:
    newer = guarded(
        f"device.attributes['{NVIDIA}'].cudaComputeCapability", ".isGreaterThan(semver('8.9.0'))"
    )
    found, _ = entry({**GPU_40G, "name": "cc", "selectors": [newer]}, CLUSTER)
    assert found.available == 6
    qualified = guarded("device.attributes['resource.kubernetes.io'].pcieRoot", " == 'pci0000:00'")
    found, _ = entry({**GPU_40G, "name": "pcie", "selectors": [qualified]}, CLUSTER)
    assert found.available == 6


def test_tainted_devices_and_older_pool_generations_do_not_count() -> None:
    taint = {"taints": [{"key": "broken", "effect": "NoSchedule"}]}
    slices = [
        resource_slice("h", gpu("gpu-0", H100), gpu("gpu-1", H100, **taint), generation=2),
        resource_slice("h", gpu("gpu-0", H100), gpu("gpu-1", H100), gpu("gpu-2", H100)),
    ]
    found, _ = entry({**H100_OR_A100, "alternatives": []}, slices)
    assert (found.available, found.capacity) == (1, 1)


def mig(name: str, slices_: int) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"type": {"string": "mig"}, "profile": {"string": f"{slices_}g"}},
        "capacity": {"memory": {"value": f"{10 * slices_}Gi"}},
        "consumesCounters": [
            {"counterSet": "gpu-0-counter-set", "counters": {"memory": {"value": f"{slices_}"}}}
        ],
    }


MIG_CLASS = devices.strip_device_class(
    {
        "metadata": {"name": "mig.nvidia.com"},
        "spec": {
            "selectors": [{"cel": {"expression": f"device.attributes['{NVIDIA}'].type == 'mig'"}}]
        },
    }
)
PARTITIONS = [
    # The counters in a slice of their own, as Kubernetes requires.
    resource_slice(
        "m",
        sharedCounters=[{"name": "gpu-0-counter-set", "counters": {"memory": {"value": "7"}}}],
    ),
    resource_slice(
        "m",
        *(mig(f"gpu-0-mig-1g-{i}", 1) for i in range(7)),
        mig("gpu-0-mig-3g-0", 3),
        mig("gpu-0-mig-7g-0", 7),
    ),
]
PARTITIONS[1]["metadata"]["name"] = "m-devices"


def by_profile(name: str, selector: str | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "displayName": name,
        "deviceClassName": "mig.nvidia.com",
        "count": 1,
        **({"selectors": [selector]} if selector else {}),
    }


def test_a_partition_is_free_only_while_its_counters_fit() -> None:
    classes = {"mig.nvidia.com": MIG_CLASS}
    small = by_profile("small", guarded(f"device.attributes['{NVIDIA}'].profile", " == '1g'"))
    whole = by_profile("whole", guarded(f"device.attributes['{NVIDIA}'].profile", " == '7g'"))
    found, _ = entry(small, PARTITIONS, classes=classes)
    assert (found.available, found.capacity) == (7, 7)
    found, _ = entry(whole, PARTITIONS, classes=classes)
    assert (found.available, found.capacity) == (1, 1)
    # A 3g partition in use leaves 4 of the 7 memory slices: four 1g, no 7g.
    taken = [claim(("m", "gpu-0-mig-3g-0"))]
    found, _ = entry(small, PARTITIONS, taken, classes=classes)
    assert (found.available, found.capacity) == (4, 7)
    found, _ = entry(whole, PARTITIONS, taken, classes=classes)
    assert (found.available, found.capacity) == (0, 1)
    # Any partition: the small ones first, so the count is of the most boxes.
    found, _ = entry(by_profile("any"), PARTITIONS, [claim(("m", "gpu-0-mig-1g-0"))], classes)
    assert (found.available, found.capacity) == (6, 7)


def test_an_extended_resource_served_by_a_device_class_counts_its_devices() -> None:
    base = ProfileAvailability(
        name="nvidia", available=0, capacity=0, reason="No node of this profile advertises x"
    )
    plain = profile(
        {"name": "nvidia", "displayName": "GPU", "resourceName": "nvidia.com/gpu", "count": 1}
    )
    found = devices.bridged(
        plain,
        base,
        devices.inventory(CLUSTER),
        devices.held_devices([claim(("l", "gpu-0"))]),
        CLASSES,
        {"h": devices.Room(), "a": devices.Room(now=0, empty=1), "l": devices.Room()},
        devices.Matcher(),
    )
    # The preset leaves no room on a now, and room for one box on it when empty.
    assert (found.available, found.capacity, found.reason) == (3, 5, None)
    other = profile(
        {"name": "amd", "displayName": "GPU", "resourceName": "amd.com/gpu", "count": 1}
    )
    assert (
        devices.bridged(
            other, base, devices.inventory(CLUSTER), set(), CLASSES, {}, devices.Matcher()
        )
        is base
    )


def test_the_newest_class_serves_an_extended_resource_then_the_first_by_name() -> None:
    def named(name: str, created: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"extendedResourceName": "example.com/gpu"},
        }

    classes = {
        "b": named("b", "2030-01-02T00:00:00Z"),
        "c": named("c", "2030-01-02T00:00:00Z"),
        "a": named("a", "2030-01-01T00:00:00Z"),
    }
    assert devices.serving_class(classes, "example.com/gpu") == "b"
    assert devices.serving_class(classes, "nvidia.com/gpu") is None


def test_the_selectors_of_the_shared_profiles_are_counted() -> None:
    # The shared test profiles are what the testbed tests use; they must be countable.
    matcher = devices.Matcher()
    device = devices.inventory(CLUSTER[:1]).devices[0]
    assert [matcher.holds(e, device) for e in (IS_H100, IS_A100, AT_LEAST_40G)] == [
        True,
        False,
        True,
    ]
