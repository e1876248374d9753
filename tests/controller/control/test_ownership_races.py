"""A box never uses an object of another owner or of an earlier box of its name, whether
the controller finds it in its cache or only when a write loses a race to it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from devboxes_controller.box import naming, ownership, render
from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.control.lifecycle import Lifecycle
from devboxes_controller.k8s.kube import Conflict
from devboxes_controller.state.store import BoxStore
from devboxes_controller.state.watches import Watches
from devboxes_testbed.controller import example_settings
from devboxes_testbed.issuer import CLI_CLIENT_ID, Issuer
from kubernetes import client
from support import StartController, two_hour_spec

from devboxes_sdk.models import API_PREFIX, DevboxCreate

# Pairs of creates of one name by two people on two replicas. A lost race used to put
# one person's box on the other's volume in about 1 of 40 pairs.
RACES = 150


@pytest.fixture
def blind_lifecycle(kube: Any, namespace: str) -> Iterator[Lifecycle]:
    """A lifecycle whose store has loaded nothing: every object it meets, it meets first
    as the answer to a write, as a replica does whose cache lags behind another's write."""
    settings = settings_from_mapping(example_settings(namespace))
    lifecycle = Lifecycle(BoxStore(settings, Watches(settings, kube)), kube, activity_key=b"k" * 32)
    yield lifecycle
    lifecycle.stop()


def _claim(kube: Any, namespace: str, name: str) -> Any:
    return client.CoreV1Api(kube).read_namespaced_persistent_volume_claim(
        naming.object_names(name).pvc, namespace
    )


def _deployments(kube: Any, namespace: str) -> list[str]:
    items = client.AppsV1Api(kube).list_namespaced_deployment(namespace).items
    return [d.metadata.name for d in items]


def test_a_claim_of_another_person_found_only_by_a_lost_write_is_refused(
    blind_lifecycle: Lifecycle, kube: Any, namespace: str
) -> None:
    core = client.CoreV1Api(kube)
    bobs = render.render_pvc(two_hour_spec("shared", owner="bob"), blind_lifecycle.settings)
    core.create_namespaced_persistent_volume_claim(namespace, bobs)

    with pytest.raises(Conflict, match="the name 'shared' is taken"):
        blind_lifecycle.create(DevboxCreate(name="shared"), asker=None)
    # The operator's create, too, leaves bob's volume to bob.
    claim = _claim(kube, namespace, "shared")
    assert claim.metadata.annotations[ownership.ANNOTATION_OWNER] == "bob"
    assert claim.spec.resources.requests["storage"] == "20Gi"
    assert _deployments(kube, namespace) == []


def test_an_own_claim_being_deleted_found_only_by_a_lost_write_is_refused(
    blind_lifecycle: Lifecycle, kube: Any, namespace: str
) -> None:
    core = client.CoreV1Api(kube)
    claim = render.render_pvc(two_hour_spec("going"), blind_lifecycle.settings)
    claim["metadata"]["finalizers"] = ["devboxes.test/hold"]
    core.create_namespaced_persistent_volume_claim(namespace, claim)
    name = claim["metadata"]["name"]
    core.delete_namespaced_persistent_volume_claim(name, namespace)
    try:
        with pytest.raises(Conflict, match="still being deleted") as refused:
            blind_lifecycle.create(DevboxCreate(name="going"), asker=None)
        assert refused.value.headers["Retry-After"]
        assert _deployments(kube, namespace) == []
    finally:
        core.patch_namespaced_persistent_volume_claim(
            name, namespace, {"metadata": {"finalizers": None}}
        )


def test_objects_left_by_an_earlier_box_of_the_name_are_replaced_not_used(
    blind_lifecycle: Lifecycle, kube: Any, namespace: str
) -> None:
    """A Service of the name that belongs to something else (here a ConfigMap, which
    keeps it from the garbage collector) is deleted and made again for the new box, never
    adopted."""
    core = client.CoreV1Api(kube)
    settings = blind_lifecycle.settings
    other = core.create_namespaced_config_map(namespace, {"metadata": {"name": "earlier"}})
    service = render.render_service(two_hour_spec("again", owner="bob"), settings)
    service["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "earlier", "uid": other.metadata.uid}
    ]
    core.create_namespaced_service(namespace, service)

    created = blind_lifecycle.create(DevboxCreate(name="again"), asker=None)
    assert created.name == "again"
    deployment = client.AppsV1Api(kube).read_namespaced_deployment("devbox-again", namespace)
    owners = core.read_namespaced_service(
        naming.object_names("again").service, namespace
    ).metadata.owner_references
    assert [o.uid for o in owners] == [deployment.metadata.uid]


def _oidc_settings(issuer: Issuer, namespace: str) -> dict[str, Any]:
    settings = example_settings(namespace)
    settings["auth"] = {"oidc": {"issuer": issuer.url, "audience": CLI_CLIENT_ID}}
    return settings


Racer = tuple[requests.Session, str]


def _race(racers: list[Racer], name: str) -> list[int]:
    """Every racer creates ``name`` at the same moment; their answers' codes, sorted."""
    barrier = threading.Barrier(len(racers))
    answers: list[int] = []

    def create(session: requests.Session, url: str) -> None:
        barrier.wait()
        answers.append(session.post(url, json={"name": name}, timeout=60).status_code)

    threads = [threading.Thread(target=create, args=racer) for racer in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(answers)


def test_two_people_racing_for_one_name_on_two_replicas_never_share_a_volume(
    start_controller: StartController, issuer: Issuer, kube: Any, namespace: str
) -> None:
    settings = _oidc_settings(issuer, namespace)
    first = start_controller(settings)
    second = start_controller(settings, token=first.token)
    racers: list[Racer] = []
    for controller, person in ((first, "alice"), (second, "bob")):
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {issuer.token_for(person)}"
        racers.append((session, controller.url + API_PREFIX + "/devboxes"))

    codes = {f"race-{i}": _race(racers, f"race-{i}") for i in range(RACES)}
    assert {name: c for name, c in codes.items() if c != [201, 409]} == {}
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)
    owner_of_box = {
        naming.box_name_of(d.to_dict()): d.metadata.annotations.get(ownership.ANNOTATION_OWNER)
        for d in apps.list_namespaced_deployment(namespace).items
    }
    owner_of_volume = {
        naming.box_name_of(c.to_dict()): c.metadata.annotations.get(ownership.ANNOTATION_OWNER)
        for c in core.list_namespaced_persistent_volume_claim(namespace).items
    }
    assert len(owner_of_box) == RACES
    assert owner_of_volume == owner_of_box
    for session, _ in racers:
        session.close()
