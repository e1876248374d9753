"""etcd that refuses every write while it still serves reads, as when its space quota is
full: the controller answers writes with 503, never 500, and ``/ready`` turns 503 once the
writes have failed for a sustained time; both recover when etcd takes writes again."""

from __future__ import annotations

import requests
from devboxes_controller.k8s.write_health import SUSTAINED_SECONDS
from devboxes_testbed.cluster import Testbed
from devboxes_testbed.controller import Controller
from support import Api, wait_for


def _alarm(testbed: Testbed, action: str) -> None:
    """Raise or clear etcd's "no space" alarm through its own maintenance API."""
    base = f"http://127.0.0.1:{testbed.ports['etcd']}/v3"
    members = requests.post(f"{base}/cluster/member/list", json={}, timeout=10).json()
    member = members["members"][0]["ID"]
    answer = requests.post(
        f"{base}/maintenance/alarm",
        json={"action": action, "memberID": member, "alarm": "NOSPACE"},
        timeout=10,
    )
    answer.raise_for_status()


def test_writes_refused_by_etcd_are_503_and_turn_ready_off_until_they_land(
    fault_controller: Controller, fault_testbed: Testbed
) -> None:
    controller = fault_controller
    api = Api(controller)
    api.created("before")
    ready = f"{controller.url}/ready"
    _alarm(fault_testbed, "ACTIVATE")
    try:
        refused = api.create({"name": "during"})
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"]
        # Reads still come from memory.
        assert api.get("before").status_code == 200

        def not_ready() -> bool:
            """/ready says the writes fail once they have for a sustained time; a stop is
            tried every few seconds meanwhile, as people keep trying"""
            api.verb("before", "stop")
            answer = requests.get(ready, timeout=10)
            return answer.status_code == 503 and "write" in answer.json()["detail"]

        wait_for(not_ready, timeout=SUSTAINED_SECONDS + 60, interval=2)
    finally:
        _alarm(fault_testbed, "DEACTIVATE")

    def writes_land() -> bool:
        """a write lands once etcd takes them, and /ready follows"""
        return api.verb("before", "stop").status_code == 200

    wait_for(writes_land, timeout=60, interval=1)
    wait_for(lambda: requests.get(ready, timeout=10).status_code == 200, timeout=60)
    api.purge("before")
