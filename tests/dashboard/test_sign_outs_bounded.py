"""Sign-outs against the real cluster: however many there are, the shared record keeps one
small entry per identity, every sign-out is answered, and the writes stay few."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import requests
from devboxes_controller.state.ended_sessions import (
    CONFIGMAP,
    EndedSessions,
    SharedEndedSessions,
    digest,
)
from devboxes_controller.web.identity.sessions import COOKIE, Person, SessionStore
from kubernetes import client, watch
from support import MemoryRecord, StartController, wait_for
from urllib3.exceptions import ProtocolError

SIGN_OUTS = 100_000
PEOPLE = 50
# Sign-outs that arrive while a write is made wait for the next, a second later at most.
HTTP_SIGN_OUTS = 300
CLIENTS = 30
# Far above one entry per person, far below what a few thousand sign-outs took when every
# sign-out kept an entry (about 90 bytes each).
MAX_RECORD_BYTES = PEOPLE * 120


class Writes:
    """Counts the changes of the record as the apiserver reports them."""

    def __init__(self, kube: Any, namespace: str) -> None:
        self.count = 0
        self._watch = watch.Watch()
        self._core = client.CoreV1Api(kube)
        self._namespace = namespace
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self._watch.stream(
                self._core.list_namespaced_config_map,
                self._namespace,
                field_selector=f"metadata.name={CONFIGMAP}",
                timeout_seconds=600,
            ):
                if event["type"] in ("ADDED", "MODIFIED"):
                    self.count += 1
        except ProtocolError:
            # Cut when the test stops it.
            return

    def stop(self) -> None:
        self._watch.stop()


def _record(kube: Any, namespace: str) -> dict[str, str]:
    found = client.CoreV1Api(kube).read_namespaced_config_map(CONFIGMAP, namespace)
    return dict(found.data or {})


def test_a_hundred_thousand_sign_outs_keep_one_entry_per_person_and_all_land(
    kube: Any, namespace: str
) -> None:
    ended = SharedEndedSessions(namespace, kube)
    ended.start()
    writes = Writes(kube, namespace)
    try:
        wait_for(ended.synced)
        people = [f"person user-{n}@example.com" for n in range(PEOPLE)]
        done: list[Future[None]] = []
        base = 1_700_000_000_000

        def sign_out(offset: int) -> None:
            for index in range(offset, SIGN_OUTS, 4):
                done.append(ended.end(people[index % PEOPLE], base + index, 4_000_000_000))

        threads = [threading.Thread(target=sign_out, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        failed = [f for f in done if f.exception(timeout=120) is not None]
        assert len(done) == SIGN_OUTS
        assert failed == []
        record = _record(kube, namespace)
        assert sorted(record) == sorted(digest(person) for person in people)
        assert sum(len(k) + len(v) for k, v in record.items()) <= MAX_RECORD_BYTES
        # Every person's newest sign-out is the one every replica refuses up to.
        newest = {people[i % PEOPLE]: base + i for i in range(SIGN_OUTS)}
        elsewhere = EndedSessions(_Snapshot(record))
        for person, started in newest.items():
            assert elsewhere.is_ended(person, started)
            assert not elsewhere.is_ended(person, started + 1)
        wait_for(lambda: writes.count > 0)
        # One write carries every sign-out that waited for it.
        assert writes.count <= SIGN_OUTS // 1_000, writes.count
    finally:
        writes.stop()
        ended.stop()


class _Snapshot(MemoryRecord):
    """The record as another replica that loaded it would see it."""

    def __init__(self, entries: dict[str, str]) -> None:
        super().__init__()
        self.entries = entries


def test_sign_outs_through_the_dashboard_all_answer_and_keep_one_entry(
    start_controller: StartController, kube: Any, namespace: str
) -> None:
    controller = start_controller()
    minted = SessionStore(controller.token, EndedSessions(MemoryRecord()))
    sessions = [minted.create(Person(f"p{n % 5}")) for n in range(HTTP_SIGN_OUTS)]
    local = threading.local()

    def sign_out(index: int) -> int:
        if not hasattr(local, "http"):
            local.http = requests.Session()
        session = sessions[index]
        answer = local.http.post(
            f"{controller.url}/dashboard/logout",
            data={"csrf": session.csrf},
            cookies={COOKIE: session.cookie},
            allow_redirects=False,
            timeout=60,
        )
        return answer.status_code

    with ThreadPoolExecutor(CLIENTS) as pool:
        codes = list(pool.map(sign_out, range(HTTP_SIGN_OUTS)))
    assert {code: codes.count(code) for code in set(codes)} == {303: HTTP_SIGN_OUTS}
    record = _record(kube, namespace)
    assert sorted(record) == sorted(digest(f"person p{n}") for n in range(5))
    # Signed out on every replica: a replica started now refuses each of them.
    replica = start_controller(token=controller.token)
    for session in sessions[-5:]:
        refused = requests.get(
            f"{replica.url}/api/v1/whoami", cookies={COOKIE: session.cookie}, timeout=10
        )
        assert refused.status_code == 401
