"""Ended dashboard sessions: refused at once here, recorded for every replica, one entry
per identity however many sign-outs, pruned."""

from __future__ import annotations

import pytest
from devboxes_controller.k8s.kube import Unavailable
from devboxes_controller.state.ended_sessions import (
    EndedSessions,
    Mark,
    digest,
    ending_patch,
    expired_entries,
)
from support import MemoryRecord

ALICE = "person alice"
BOB = "person bob"


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


def test_a_sign_out_ends_its_session_and_earlier_ones_here_at_once_elsewhere_once_written() -> None:
    record, here, elsewhere = two_replicas()
    done = here.end(ALICE, started_ms=900_500, until=5000)
    assert not done.done()
    assert here.is_ended(ALICE, 900_500)
    assert here.is_ended(ALICE, 10)
    # A session started later, and another person's, go on.
    assert not here.is_ended(ALICE, 900_501)
    assert not here.is_ended(BOB, 10)
    assert not elsewhere.is_ended(ALICE, 900_500)
    assert here.unwritten() == 1
    here.flush()
    assert done.result(timeout=0) is None
    assert here.unwritten() == 0
    assert elsewhere.is_ended(ALICE, 900_500)
    assert not elsewhere.is_ended(ALICE, 900_501)
    # A replica started after the sign-out reads the same record.
    assert EndedSessions(record, Clock()).is_ended(ALICE, 900_500)


def test_the_record_holds_a_digest_of_the_identity_never_its_name() -> None:
    record = MemoryRecord()
    ended = EndedSessions(record, Clock())
    ended.end(ALICE, started_ms=900_000, until=5000)
    ended.flush()
    assert record.entries == {digest(ALICE): "900000:5000"}
    assert "alice" not in repr(record.patches)
    assert digest(ALICE) != digest(BOB)


def test_many_sign_outs_of_few_people_keep_one_entry_each_and_few_writes() -> None:
    record = MemoryRecord()
    clock = Clock()
    ended = EndedSessions(record, clock)
    futures = []
    for index in range(100_000):
        person = (ALICE, BOB, "-")[index % 3]
        futures.append(ended.end(person, started_ms=900_000 + index, until=90_000))
        if index % 10_000 == 9_999:
            ended.flush()
    assert all(f.result(timeout=0) is None for f in futures)
    assert len(record.entries) == 3
    assert len(record.patches) == 10
    assert Mark.parse(record.entries[digest(ALICE)]) == Mark(900_000 + 99_999, 90_000)
    assert len(repr(record.entries)) < 400


def test_a_mark_only_moves_later_whichever_replica_writes_last() -> None:
    record, here, elsewhere = two_replicas()
    here.end(ALICE, started_ms=950_000, until=6000)
    here.flush()
    elsewhere.end(ALICE, started_ms=920_000, until=5000)
    elsewhere.flush()
    assert record.entries == {digest(ALICE): "950000:6000"}
    assert here.is_ended(ALICE, 950_000)


def test_a_failed_write_stays_queued_tells_its_waiters_and_the_session_stays_refused_here() -> None:
    record = MemoryRecord()
    ended = EndedSessions(record, Clock())
    record.down = True
    done = ended.end(ALICE, started_ms=900_000, until=5000)
    with pytest.raises(Unavailable):
        ended.flush()
    with pytest.raises(Unavailable):
        done.result(timeout=0)
    assert ended.is_ended(ALICE, 900_000)
    assert ended.unwritten() == 1
    assert record.entries == {}
    record.down = False
    ended.flush()
    assert record.entries == {digest(ALICE): "900000:5000"}
    assert ended.unwritten() == 0


def test_writes_prune_entries_whose_sessions_have_all_expired_anyway() -> None:
    record = MemoryRecord()
    clock = Clock()
    ended = EndedSessions(record, clock)
    ended.end(ALICE, started_ms=900_000, until=2000)
    ended.flush()
    record.entries["unreadable"] = "soon"
    clock.now = 2000
    ended.end(BOB, started_ms=1_999_000, until=9000)
    ended.flush()
    assert record.patches[-1] == {
        digest(ALICE): None,
        "unreadable": None,
        digest(BOB): "1999000:9000",
    }
    assert record.entries == {digest(BOB): "1999000:9000"}


def test_a_queued_mark_that_expires_before_it_is_written_is_dropped() -> None:
    record = MemoryRecord()
    clock = Clock()
    ended = EndedSessions(record, clock)
    record.down = True
    ended.end(ALICE, started_ms=900_000, until=1500)
    with pytest.raises(Unavailable):
        ended.flush()
    clock.now = 1500
    record.down = False
    ended.flush()
    assert ended.unwritten() == 0
    assert record.patches == []


def test_a_deleted_record_reopens_sessions_except_where_they_ended() -> None:
    record, here, elsewhere = two_replicas()
    here.end(ALICE, started_ms=900_000, until=5000)
    here.flush()
    record.entries.clear()
    assert not elsewhere.is_ended(ALICE, 900_000)
    assert here.is_ended(ALICE, 900_000)


def test_the_patch_moves_marks_later_only_and_removes_expired_entries() -> None:
    recorded = {"old": "1:900", "live": "5:1200", "bad": "x", "same": "7:3000"}
    assert expired_entries(recorded, 1000) == ["old", "bad"]
    pending = {
        "new": Mark(9, 3000),
        "late": Mark(9, 1000),
        "live": Mark(4, 1100),
        "same": Mark(7, 3000),
    }
    assert ending_patch(pending, recorded, 1000) == {
        "old": None,
        "bad": None,
        "new": "9:3000",
    }
    assert ending_patch({"live": Mark(6, 1100)}, recorded, 1000) == {
        "old": None,
        "bad": None,
        "live": "6:1200",
    }
    assert ending_patch({}, {}, 1000) == {}
