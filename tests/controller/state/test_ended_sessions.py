"""Ended dashboard sessions: refused at once here, recorded for every replica, pruned."""

from __future__ import annotations

import pytest
from devboxes_controller.k8s.kube import Unavailable
from devboxes_controller.state.ended_sessions import (
    EndedSessions,
    digest,
    ending_patch,
    expired_entries,
)
from support import MemoryRecord

SESSION = "a-session-id-of-forty-three-characters-long"
OTHER = "another-session-id-of-forty-three-characters"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def two_replicas() -> tuple[MemoryRecord, EndedSessions, EndedSessions]:
    """One record, and two replicas that share it and a clock."""
    record = MemoryRecord()
    clock = Clock()
    return record, EndedSessions(record, clock), EndedSessions(record, clock)


def test_an_ended_session_is_refused_here_at_once_and_elsewhere_once_written() -> None:
    record, here, elsewhere = two_replicas()
    here.end(SESSION, until=5000)
    assert here.is_ended(SESSION)
    assert not elsewhere.is_ended(SESSION)
    assert here.unwritten() == 1
    here.flush()
    assert here.unwritten() == 0
    assert elsewhere.is_ended(SESSION)
    assert not elsewhere.is_ended(OTHER)
    # A replica started after the logout reads the same record.
    assert EndedSessions(record, Clock()).is_ended(SESSION)


def test_the_record_holds_a_digest_and_the_sessions_end_never_the_id() -> None:
    record = MemoryRecord()
    ended = EndedSessions(record, Clock())
    ended.end(SESSION, until=5000)
    ended.flush()
    assert record.entries == {digest(SESSION): "5000"}
    assert SESSION not in repr(record.patches)
    assert digest(SESSION) != digest(OTHER)
    assert len(digest(SESSION)) == 64


def test_a_failed_write_stays_queued_and_the_session_stays_refused_here() -> None:
    record = MemoryRecord()
    ended = EndedSessions(record, Clock())
    record.down = True
    ended.end(SESSION, until=5000)
    with pytest.raises(Unavailable):
        ended.flush()
    assert ended.is_ended(SESSION)
    assert ended.unwritten() == 1
    assert record.entries == {}
    record.down = False
    ended.flush()
    assert record.entries == {digest(SESSION): "5000"}
    assert ended.unwritten() == 0


def test_writes_prune_entries_whose_session_has_expired_anyway() -> None:
    record = MemoryRecord()
    clock = Clock()
    ended = EndedSessions(record, clock)
    ended.end(SESSION, until=2000)
    ended.flush()
    record.entries["unreadable"] = "soon"
    clock.now = 2000
    assert not EndedSessions(record, clock).is_ended(OTHER)
    ended.end(OTHER, until=9000)
    ended.flush()
    assert record.patches[-1] == {
        digest(SESSION): None,
        "unreadable": None,
        digest(OTHER): "9000",
    }
    assert record.entries == {digest(OTHER): "9000"}


def test_a_queued_entry_that_expires_before_it_is_written_is_dropped() -> None:
    record = MemoryRecord()
    clock = Clock()
    ended = EndedSessions(record, clock)
    record.down = True
    ended.end(SESSION, until=1500)
    with pytest.raises(Unavailable):
        ended.flush()
    clock.now = 1500
    record.down = False
    ended.flush()
    assert ended.unwritten() == 0
    assert record.patches == []


def test_a_deleted_record_reopens_sessions_except_where_they_ended() -> None:
    record, here, elsewhere = two_replicas()
    here.end(SESSION, until=5000)
    here.flush()
    record.entries.clear()
    assert not elsewhere.is_ended(SESSION)
    assert here.is_ended(SESSION)


def test_the_patch_adds_live_entries_and_removes_expired_ones() -> None:
    recorded = {"old": "900", "live": "1200", "bad": "x"}
    assert expired_entries(recorded, 1000) == ["old", "bad"]
    assert ending_patch({"new": 3000, "late": 1000}, recorded, 1000) == {
        "old": None,
        "bad": None,
        "new": "3000",
    }
    assert ending_patch({}, {}, 1000) == {}
