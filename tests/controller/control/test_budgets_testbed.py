"""GPU-hour budgets on the testbed, against real controllers and a usage record written as
the leader writes it: a group's budget used up refuses its members' next start and create
(not the operator's, not another group's, not a box without a GPU) in one sentence, and a
running box whose owner used up a budget gets the Event ``BudgetExceeded`` once, then,
under a new leader with ``stopOverBudget``, is stopped with its home volume intact."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from devboxes_controller.box import naming
from devboxes_controller.k8s.timestamps import minute_label
from devboxes_controller.placement import usage_ledger as ledger
from devboxes_testbed.controller import Controller, example_settings
from devboxes_testbed.issuer import CLI_CLIENT_ID, Issuer
from kubernetes import client
from support import Person, StartController, event_messages, wait_for
from usage_rows import row, seed

HOUR = 3600
GPU = {"gpu": {"profile": "nvidia-l4"}, "ttl_hours": 1}


def _settings(issuer: Issuer, namespace: str, limits: dict[str, Any]) -> dict[str, Any]:
    settings = example_settings(namespace)
    settings["auth"] = {
        "adminGroups": ["gpu-admins"],
        "oidc": {"issuer": issuer.url, "audience": CLI_CLIENT_ID},
    }
    settings["limits"] = limits
    return settings


def _today() -> date:
    return datetime.now(UTC).date()


def _midnight(day: date) -> str:
    return minute_label(datetime.fromtimestamp(ledger.day_start(day), UTC))


def _people(controller: Controller, issuer: Issuer) -> dict[str, Person]:
    found = {name: Person(controller, issuer.token_for(name)) for name in ("alice", "bob")}
    found["olivia"] = Person(controller, issuer.token_for("olivia"))
    found["operator"] = Person(controller, controller.token)
    return found


ML_BUDGET = {"groups": {"ml": {"budgets": [{"profile": "nvidia-l4", "hours": 2, "days": 7}]}}}


def test_a_used_up_group_budget_refuses_the_next_start_and_create_in_one_sentence(
    start_controller: StartController, issuer: Issuer, kube: Any, namespace: str
) -> None:
    controller = start_controller(_settings(issuer, namespace, ML_BUDGET))
    people = _people(controller, issuer)
    alice, bob, olivia, operator = (people[n] for n in ("alice", "bob", "olivia", "operator"))
    try:
        assert alice("POST", "/devboxes", json={"name": "al-gpu", **GPU}).status_code == 201
        assert alice("POST", "/devboxes/al-gpu/stop").status_code == 200
        # Another member of ml used three nvidia-l4 hours two days ago.
        day = _today() - timedelta(days=2)
        seed(
            kube,
            namespace,
            [row("seeded", "carol", "nvidia-l4", day, groups=("ml",), busy=3 * HOUR)],
        )

        def seen() -> bool:
            """the controller's usage record holds the seeded row"""
            report = olivia("GET", "/usage", params={"all": "true", "since": day.isoformat()})
            return report.json()["total"]["allocated_seconds"] >= 3 * HOUR

        wait_for(seen)
        sentence = (
            "group ml's members used 3.0 of their 2 nvidia-l4 hours in the last 7 days; "
            f"3.0 hours come back at {_midnight(day + timedelta(days=7))}"
        )
        start = alice("POST", "/devboxes/al-gpu/start")
        assert (start.status_code, start.json()["detail"]) == (409, sentence)
        assert alice("GET", "/devboxes/al-gpu").json()["state"] == "stopped"
        create = alice("POST", "/devboxes", json={"name": "al-gpu2", **GPU})
        assert (create.status_code, create.json()["detail"]) == (409, sentence)
        assert alice("GET", "/devboxes/al-gpu2").status_code == 404
        # A box without a GPU has no budget; bob is not in ml; the operator has none.
        assert (
            alice("POST", "/devboxes", json={"name": "al-cpu", "ttl_hours": 1}).status_code == 201
        )
        assert bob("POST", "/devboxes", json={"name": "bo-gpu", **GPU}).status_code == 201
        assert operator("POST", "/devboxes", json={"name": "op-gpu", **GPU}).status_code == 201
        doctor = operator("GET", "/gpu/doctor").json()
        line = next(c for c in doctor["checks"] if c["check"] == "limits")
        assert "group ml: 2 nvidia-l4 hours per 7 days" in line["message"]
    finally:
        for person in people.values():
            person.close()


OWN_BUDGET = {"perPerson": {"budgets": [{"profile": "nvidia-l4", "hours": 1, "days": 3}]}}


def test_a_running_box_over_budget_is_told_once_and_stopped_under_a_new_leader(
    start_controller: StartController, issuer: Issuer, kube: Any, namespace: str
) -> None:
    first = start_controller(_settings(issuer, namespace, OWN_BUDGET))
    alice = Person(first, issuer.token_for("alice"))
    try:
        assert alice("POST", "/devboxes", json={"name": "al-run", **GPU}).status_code == 201
        names = naming.object_names("al-run")
        core = client.CoreV1Api(kube)
        home = core.read_namespaced_persistent_volume_claim(names.pvc, namespace).metadata.uid
        day = _today() - timedelta(days=1)
        seed(kube, namespace, [row("seeded", "alice", "nvidia-l4", day, busy=2 * HOUR)])
        told = (
            "alice used 2.0 of their 1 nvidia-l4 hours in the last 3 days; "
            f"2.0 hours come back at {_midnight(day + timedelta(days=3))}"
        )

        def exceeded() -> list[str]:
            """the box's Deployment has its BudgetExceeded Event"""
            return event_messages(kube, namespace, "al-run", "BudgetExceeded")

        assert wait_for(exceeded) == [told]
        # Without stopOverBudget the box runs on.
        assert alice("GET", "/devboxes/al-run").json()["state"] != "stopped"
    finally:
        alice.close()
    first.stop()

    stopping = _settings(issuer, namespace, {**OWN_BUDGET, "stopOverBudget": True})
    second = start_controller(stopping)
    alice = Person(second, issuer.token_for("alice"))
    try:
        stopped = (
            "Stopped: alice used their 1 nvidia-l4 hours of the last 3 days; "
            f"hours come back at {_midnight(day + timedelta(days=3))}."
        )

        def stopped_event() -> list[str]:
            """the new leader stopped the box and said so"""
            return event_messages(kube, namespace, "al-run", "BudgetStopped")

        assert wait_for(stopped_event) == [f"{stopped} Storage kept."]
        # Once the pod is gone (until then the message also says it is shutting down).
        wait_for(lambda: alice("GET", "/devboxes/al-run").json()["message"] == stopped)
        box = alice("GET", "/devboxes/al-run").json()
        assert (box["state"], box["message"]) == ("stopped", stopped)
        # The new leader did not tell of the crossing again (its Events go out in order).
        assert exceeded() == [told]
        deployment = client.AppsV1Api(kube).read_namespaced_deployment(names.deployment, namespace)
        assert deployment.spec.replicas == 0
        claim = core.read_namespaced_persistent_volume_claim(names.pvc, namespace)
        assert (claim.metadata.uid, claim.metadata.deletion_timestamp) == (home, None)
        # A start past the budget is refused as well.
        again = alice("POST", "/devboxes/al-run/start")
        assert again.status_code == 409
        assert again.json()["detail"].startswith("you used ")
        assert (
            "of your 1 nvidia-l4 hours in the last 3 days; 2.0 hours come back"
            in (again.json()["detail"])
        )
    finally:
        alice.close()
