"""People on the testbed: a real OpenID provider's tokens for alice and bob (group ml and
vision) and olivia (gpu-admins), against a real controller. Every route answers someone
else's box as if it were absent; limits hold on create and start; keys stay per person;
one person's flood of reads that ask Kubernetes takes nothing from the others; the
doctor's details are for admins."""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from devboxes_controller.box.naming import object_names
from devboxes_controller.box.ownership import LABEL_OWNER
from devboxes_testbed.controller import example_settings
from devboxes_testbed.issuer import CLI_CLIENT_ID, Issuer
from support import Person, StartController

from devboxes_sdk.models import API_PREFIX

OWNED = "first-box"
ABSENT = "nobody-here"


def _settings(issuer: Issuer, namespace: str, limits: dict[str, Any] | None) -> dict[str, Any]:
    settings = example_settings(namespace)
    settings["auth"] = {
        "adminGroups": ["gpu-admins"],
        "oidc": {"issuer": issuer.url, "audience": CLI_CLIENT_ID},
    }
    if limits is not None:
        settings["limits"] = limits
    return settings


@pytest.fixture
def people(
    start_controller: StartController, issuer: Issuer, namespace: str, request: Any
) -> Iterator[dict[str, Person]]:
    limits = getattr(request, "param", None)
    controller = start_controller(_settings(issuer, namespace, limits))
    found = {name: Person(controller, issuer.token_for(name)) for name in ("alice", "bob")}
    found["olivia"] = Person(controller, issuer.token_for("olivia"))
    found["operator"] = Person(controller, controller.token)
    yield found
    for person in found.values():
        person.session.close()


# Every route that names a box or a volume, as someone else would call it.
NAMED_ROUTES = [
    ("GET", "/devboxes/{name}", {}),
    ("GET", "/devboxes/{name}", {"params": {"wait": "ready", "timeout": "1"}}),
    ("POST", "/devboxes/{name}/start", {}),
    ("POST", "/devboxes/{name}/stop", {}),
    ("POST", "/devboxes/{name}/extend", {"json": {"hours": 1}}),
    ("DELETE", "/devboxes/{name}", {}),
    ("DELETE", "/devboxes/{name}", {"params": {"purge": "true"}}),
    ("DELETE", "/volumes/{name}", {}),
]


def _without_name(response: requests.Response, name: str) -> tuple[int, str]:
    return response.status_code, response.text.replace(name, "NAME")


def test_every_route_answers_someone_elses_box_as_if_it_were_absent(
    people: dict[str, Person],
) -> None:
    alice, bob, olivia = people["alice"], people["bob"], people["olivia"]
    made = alice("POST", "/devboxes", json={"name": OWNED, "ttl_hours": 1})
    assert made.status_code == 201, made.text
    assert made.json()["owner"] == "alice"

    for method, path, kwargs in NAMED_ROUTES:
        theirs = bob(method, path.format(name=OWNED), **kwargs)
        nothing = bob(method, path.format(name=ABSENT), **kwargs)
        assert theirs.status_code == 404, (method, path, theirs.text)
        # Not even the wording tells an owned box from an absent one.
        assert _without_name(theirs, OWNED) == _without_name(nothing, ABSENT), (method, path)

    listed = bob("GET", "/devboxes").json()["items"]
    assert OWNED not in {box["name"] for box in listed}
    assert OWNED not in {v["name"] for v in bob("GET", "/volumes").json()["items"]}
    refused = bob("GET", "/devboxes", params={"owner": "alice"})
    assert refused.status_code == 403, refused.text
    assert "only admins" in refused.json()["detail"]
    metrics = bob.session.get(bob.base.removesuffix(API_PREFIX) + "/metrics", timeout=60)
    assert metrics.status_code == 403
    # A name is unique in the cluster: taken, without saying by whom.
    taken = bob("POST", "/devboxes", json={"name": OWNED, "ttl_hours": 1})
    assert taken.status_code == 409
    assert taken.json()["detail"] == (
        f"the name '{OWNED}' is taken by someone else's box; choose another"
    )
    # The owner, who sees the box, is told it exists.
    again = alice("POST", "/devboxes", json={"name": OWNED, "ttl_hours": 1})
    assert (again.status_code, again.json()["detail"]) == (
        409,
        f"devbox '{OWNED}' already exists",
    )

    # Nothing bob tried changed alice's box.
    mine = alice("GET", f"/devboxes/{OWNED}")
    assert mine.status_code == 200
    assert mine.json()["state"] != "stopped"

    # An admin group sees everyone's, and may narrow to one person.
    assert olivia("GET", f"/devboxes/{OWNED}").status_code == 200
    only_alice = olivia("GET", "/devboxes", params={"owner": "alice"}).json()["items"]
    assert [box["name"] for box in only_alice] == [OWNED]
    whoami = olivia("GET", "/whoami").json()
    assert (whoami["user"], whoami["mode"], whoami["admin"]) == ("olivia", "oidc", True)
    assert people["operator"]("GET", f"/devboxes/{OWNED}").json()["owner"] == "alice"
    assert alice("DELETE", f"/devboxes/{OWNED}", params={"purge": "true"}).status_code == 200


def test_a_box_and_its_objects_carry_the_owner(
    people: dict[str, Person], kube: Any, namespace: str
) -> None:
    from kubernetes import client

    alice = people["alice"]
    assert alice("POST", "/devboxes", json={"name": OWNED, "ttl_hours": 1}).status_code == 201
    names = object_names(OWNED)
    deployment = client.AppsV1Api(kube).read_namespaced_deployment(names.deployment, namespace)
    claim = client.CoreV1Api(kube).read_namespaced_persistent_volume_claim(names.pvc, namespace)
    for metadata in (deployment.metadata, deployment.spec.template.metadata, claim.metadata):
        assert metadata.labels[LABEL_OWNER] == "alice"
    assert alice("DELETE", f"/devboxes/{OWNED}", params={"purge": "true"}).status_code == 200


LIMITS = {
    "perPerson": {"boxes": 2, "devices": {"nvidia.com/gpu": 1}},
    "groups": {"vision": {"presets": ["small"], "maxTtlHours": 4}},
}


@pytest.mark.parametrize("people", [LIMITS], indirect=True)
def test_limits_hold_on_create_and_start_and_not_for_the_operator(
    people: dict[str, Person],
) -> None:
    alice, bob, operator = people["alice"], people["bob"], people["operator"]
    gpu = {"gpu": {"profile": "nvidia-l4"}, "ttl_hours": 1}
    assert alice("POST", "/devboxes", json={"name": "al-gpu", **gpu}).status_code == 201
    second = alice("POST", "/devboxes", json={"name": "al-gpu2", **gpu})
    assert second.status_code == 409
    assert "hold 1 nvidia.com/gpu, this box needs 1, and the limit is 1" in second.json()["detail"]
    assert alice("POST", "/devboxes", json={"name": "al-cpu", "ttl_hours": 1}).status_code == 201
    third = alice("POST", "/devboxes", json={"name": "al-cpu2", "ttl_hours": 1})
    assert third.status_code == 409
    assert "you have 2 boxes, and the limit is 2" in third.json()["detail"]

    # A stopped box holds no device: another may start, and the first may not start again
    # while it runs.
    assert alice("POST", "/devboxes/al-gpu/stop").status_code == 200
    assert alice("DELETE", "/devboxes/al-cpu").status_code == 200
    assert alice("POST", "/devboxes", json={"name": "al-gpu2", **gpu}).status_code == 201
    again = alice("POST", "/devboxes/al-gpu/start")
    assert again.status_code == 409
    assert "stop a box first" in again.json()["detail"]

    # Group bounds: bob's group allows small boxes for at most four hours.
    large = bob("POST", "/devboxes", json={"name": "bo-large", "preset": "large", "ttl_hours": 1})
    assert large.status_code == 422
    assert "preset large is not allowed for your groups (vision)" in large.text
    long = bob("POST", "/devboxes", json={"name": "bo-long", "ttl_hours": 5})
    assert long.status_code == 422
    assert "must be at most 4" in long.text
    # Alice's boxes do not count against bob.
    assert bob("POST", "/devboxes", json={"name": "bo-gpu", **gpu}).status_code == 201
    # The operator token has no limits.
    assert operator("POST", "/devboxes", json={"name": "op-gpu", **gpu}).status_code == 201
    assert operator("POST", "/devboxes", json={"name": "op-gpu2", **gpu}).status_code == 201
    doctor = operator("GET", "/gpu/doctor").json()
    line = next(c for c in doctor["checks"] if c["check"] == "limits")
    assert "each person: at most 2 boxes, 1 nvidia.com/gpu running" in line["message"]


def test_ssh_keys_are_each_persons_own(people: dict[str, Person], tmp_path: Path) -> None:
    alice, bob, operator = people["alice"], people["bob"], people["operator"]
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    public = key.with_suffix(".pub").read_text().strip()
    added = alice("POST", "/keys", json={"key": public})
    assert added.status_code == 201, added.text
    fingerprint = added.json()["fingerprint"]
    assert [k["fingerprint"] for k in alice("GET", "/keys").json()["items"]] == [fingerprint]
    assert bob("GET", "/keys").json()["items"] == []
    # Bob cannot remove alice's key: to him it does not exist.
    assert bob("DELETE", "/keys", params={"fingerprint": fingerprint}).status_code == 404
    # The operator token has no keys of its own: it lists none and may add none.
    assert operator("GET", "/keys").json()["items"] == []
    refused = operator("POST", "/keys", json={"key": public})
    assert refused.status_code == 409
    # What the operator does instead: the Secret its boxes read.
    assert "controller.ssh.authorizedKeysSecret" in refused.json()["detail"]
    assert alice("DELETE", "/keys", params={"fingerprint": fingerprint}).status_code == 200
    assert alice("GET", "/keys").json()["items"] == []


FLOOD = 40
FLOODED_BOXES = ("fl-one", "fl-two", "fl-three")


def test_one_persons_flood_of_reads_that_ask_kubernetes_leaves_others_their_share(
    people: dict[str, Person],
) -> None:
    alice, bob, operator = people["alice"], people["bob"], people["operator"]
    flooding = threading.Event()
    flooding.set()
    answers: Counter[int] = Counter()
    counted = threading.Lock()

    def flood(path: str) -> None:
        # One session per thread: a requests.Session is not meant to be shared.
        with requests.Session() as session:
            session.headers.update(bob.session.headers)
            while flooding.is_set():
                status = session.get(bob.base + path, timeout=60).status_code
                with counted:
                    answers[status] += 1

    def total() -> int:
        with counted:
            return sum(answers.values())

    with ThreadPoolExecutor(FLOOD) as pool:
        floods = [
            pool.submit(flood, "/keys" if i % 10 == 0 else "/gpu/doctor") for i in range(FLOOD)
        ]
        while total() < FLOOD:
            time.sleep(0.05)
        before = total()
        changes = [
            alice("POST", "/devboxes", json={"name": n, "ttl_hours": 1}) for n in FLOODED_BOXES
        ]
        changes += [alice("POST", f"/devboxes/{n}/stop") for n in FLOODED_BOXES]
        changes += [alice("POST", f"/devboxes/{n}/start") for n in FLOODED_BOXES]
        alices_keys = alice("GET", "/keys")
        operators_doctor = operator("GET", "/gpu/doctor")
        changes += [
            alice("DELETE", f"/devboxes/{n}", params={"purge": "true"}) for n in FLOODED_BOXES
        ]
        during = total() - before
        flooding.clear()
        for running in floods:
            running.result()

    assert [c.status_code for c in changes] == [201] * 3 + [200] * 9, [
        c.text for c in changes if c.status_code >= 300
    ]
    assert alices_keys.status_code == 200, alices_keys.text
    assert operators_doctor.status_code == 200, operators_doctor.text
    # Bob's flood went on all along; he was served his share and refused the rest.
    assert during >= FLOOD, answers
    assert set(answers) == {200, 429}, answers


KEYS_SECRET = "team-ssh-keys"


def test_the_doctors_details_are_for_admins(
    start_controller: StartController, issuer: Issuer, namespace: str, kube: Any
) -> None:
    from kubernetes import client

    settings = _settings(issuer, namespace, None)
    settings["ssh"]["authorizedKeysSecret"] = KEYS_SECRET
    controller = start_controller(settings)
    tokens = {who: issuer.token_for(who) for who in ("bob", "olivia")}
    tokens["operator"] = controller.token
    asking = {who: Person(controller, token) for who, token in tokens.items()}
    answers = {who: person("GET", "/gpu/doctor") for who, person in asking.items()}
    for person in asking.values():
        person.session.close()
    assert {who: a.status_code for who, a in answers.items()} == dict.fromkeys(tokens, 200)
    reports = {who: a.json() for who, a in answers.items()}
    full, bobs = reports["operator"], reports["bob"]
    assert reports["olivia"] == full

    named = ["accelerator=nvidia-l4", "accelerator=amd-rocm", "RuntimeClass nvidia", KEYS_SECRET]
    assert [n for n in named if n not in answers["operator"].text] == []
    nodes = [n.metadata.name for n in client.CoreV1Api(kube).list_node().items]
    hidden = [*named, *nodes, "nodeSelector", "RuntimeClass", "Secret", "NoSchedule"]
    assert [h for h in hidden if h in answers["bob"].text] == []
    assert bobs["ok"] == full["ok"]
    assert [(c["profile"], c["check"], c["verdict"]) for c in bobs["checks"]] == [
        (c["profile"], c["check"], c["verdict"]) for c in full["checks"]
    ]
