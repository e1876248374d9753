"""The table of watches: which exist under which settings, what each keeps, and that the
store and availability share them rather than build their own.

Nothing here reaches an apiserver: the watches are built and never started.
"""

from __future__ import annotations

from typing import Any

import pytest
from devboxes_controller.config.settings import Settings, settings_from_mapping
from devboxes_controller.k8s.kube import Apis
from devboxes_controller.state import cache, slim, watches
from devboxes_controller.state.availability import Availability
from devboxes_controller.state.line import DeviceLine
from devboxes_controller.state.store import BoxStore
from dra_profiles import GPU_40G
from kubernetes import client

L4: dict[str, Any] = {
    "name": "nvidia-l4",
    "displayName": "NVIDIA L4",
    "resourceName": "nvidia.com/gpu",
    "count": 1,
}
BY_RUNTIME = {**L4, "name": "l4-runtime", "runtimeClassName": "nvidia"}

BOXES = {
    "deployments",
    "replicasets",
    "pods",
    "services",
    "persistentvolumeclaims",
    "events",
    "bookings",
}
# Read by the mount retry alone: /ready does not wait for it.
MOUNTS = {"events (failed mounts)"}
# The usage record, read by the recorder, the reports and the budgets: /ready does not wait.
USAGE = {"usage"}
DRA = {"resourceclaimtemplates", "resourceclaims"}
COUNTING = {"nodes", "pods (all namespaces)"}
DEVICES = {"resourceslices", "resourceclaims (all namespaces)", "deviceclasses"}


def settings(profiles: list[dict[str, Any]], availability: bool = True) -> Settings:
    return settings_from_mapping(
        {
            "namespace": "devboxes",
            "availability": {"enabled": availability},
            "gpu": {
                "enabled": True,
                "defaultProfile": profiles[0]["name"],
                "profiles": profiles,
            },
        }
    )


@pytest.mark.parametrize(
    ("profiles", "counted", "expected"),
    [
        # The conditions under which each watch was built by hand before the table.
        ([L4], True, BOXES | COUNTING | DEVICES),
        ([L4], False, BOXES),
        ([L4, BY_RUNTIME], True, BOXES | COUNTING | DEVICES | {"runtimeclasses"}),
        ([L4, BY_RUNTIME], False, BOXES),
        ([L4, GPU_40G], True, BOXES | DRA | COUNTING | DEVICES),
        ([L4, GPU_40G], False, BOXES | DRA | {"resourceslices"}),
    ],
)
def test_the_settings_call_for_the_same_watches_as_ever(
    profiles: list[dict[str, Any]], counted: bool, expected: set[str]
) -> None:
    built = watches.Watches(settings(profiles, counted), client.ApiClient())
    assert {informer.kind for informer in built} == expected | MOUNTS | USAGE
    # /ready waits for the box namespace's watches only.
    assert {informer.kind for informer in built.ready()} == expected & (BOXES | DRA)


def test_each_row_is_listed_by_the_client_and_kept_as_slim_keeps_it() -> None:
    apis = Apis(client.ApiClient())
    strips = {getattr(slim, name) for name in dir(slim) if not name.startswith("_")}
    assert len({w.name for w in watches.WATCHES}) == len(watches.WATCHES) == 18
    for watch in watches.WATCHES:
        lister = watch.kind.lister(apis, all_namespaces=watch.cluster)
        assert callable(lister)
        scope = "for_all_namespaces" if watch.cluster and watch.kind.namespaced else ""
        assert lister.__name__.startswith("list_")
        assert lister.__name__.endswith(scope)
        assert watch.strip is None or watch.strip in strips, watch.name
        assert watch.keep is None or watch.keep in strips, watch.name
    # Every box watch is indexed by box; the cluster's are not.
    assert all(w.box_of is not None for w in watches.BOX_WATCHES)
    assert all(w.box_of is None for w in watches.COUNTING + watches.DEVICES)


def test_the_store_and_availability_read_the_watches_they_are_handed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[str] = []
    original = cache.Informer.__init__

    def counted(self: cache.Informer, kind: str, *args: Any, **kwargs: Any) -> None:
        made.append(kind)
        original(self, kind, *args, **kwargs)

    monkeypatch.setattr(cache.Informer, "__init__", counted)
    configured = settings([L4, GPU_40G])
    shared = watches.Watches(configured, client.ApiClient())
    assert len(made) == len(list(shared))
    line = DeviceLine()
    availability = Availability(configured, shared, line)
    store = BoxStore(configured, shared, availability, line)
    # Neither built a watch of its own: one informer per watch, the same for both.
    assert len(made) == len(list(shared))
    assert store.availability is availability
    assert store._caches.slices is shared[watches.RESOURCE_SLICES]
    assert availability.device_informers[0] is shared[watches.RESOURCE_SLICES]
    assert store._caches.pods is shared[watches.PODS]
    assert availability.informers == (shared[watches.NODES], shared[watches.CLUSTER_PODS])


def test_a_dra_box_reads_its_device_from_the_shared_slices_and_hears_when_one_arrives() -> None:
    configured = settings([L4, GPU_40G], availability=False)
    shared = watches.Watches(configured, client.ApiClient())
    store = BoxStore(configured, shared)
    recomputed: list[str] = []
    store.add_listener(recomputed.append)
    box = "trainer"
    claim = {
        "metadata": {
            "name": f"{box}-gpu",
            "resourceVersion": "1",
            "labels": {"devboxes.io/box": box},
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "g0"}
                    ]
                }
            }
        },
    }
    shared[watches.RESOURCE_CLAIMS]._put(slim.resource_claim(claim))
    assert store._allocated_devices(shared[watches.RESOURCE_CLAIMS].for_box(box)) == {}

    # The slice naming the device arrives after the allocation: the box is derived again.
    slices = shared[watches.RESOURCE_SLICES]
    published = {
        "metadata": {"name": "n1-slice", "resourceVersion": "2"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "pool": {"name": "n1", "generation": 1},
            "devices": [{"name": "g0", "attributes": {"productName": {"string": "H100"}}}],
        },
    }
    slices._put(slim.resource_slice(published))
    slices._updated()
    assert recomputed == [box]
    found = store._allocated_devices(shared[watches.RESOURCE_CLAIMS].for_box(box))
    assert list(found) == [("gpu.nvidia.com", "n1", "g0")]
