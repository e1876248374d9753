"""The alias a box's host key is recorded under, and the words of a changed key."""

from __future__ import annotations

from pathlib import Path

from devboxes_jupyter.hostkeys import alias, changed_message

from devboxes_sdk import models

HERE = "https://devboxes.example.com"
THERE = "https://devboxes.elsewhere.example"


def _box(**fields: object) -> models.Devbox:
    return models.Devbox.model_validate(
        {"name": "nb-ada-cpu", "state": "ready", "preset": "small",
         "created_at": "2026-12-04T08:00:00Z", **fields}
    )  # fmt: skip


def test_the_alias_names_the_box_and_follows_its_cluster_and_identity() -> None:
    box = _box(uid="3f1c0a5e-0000-4000-8000-000000000001")
    recorded = alias(HERE, box)
    assert recorded.startswith("devbox-nb-ada-cpu-")
    assert len(recorded) == len("devbox-nb-ada-cpu-") + 16
    # The same box, fetched again, is recorded under the same alias.
    assert alias(HERE, _box(uid="3f1c0a5e-0000-4000-8000-000000000001")) == recorded
    # A box of the name made again, or of another cluster, is not.
    assert alias(HERE, _box(uid="3f1c0a5e-0000-4000-8000-000000000002")) != recorded
    assert alias(THERE, box) != recorded


def test_without_a_uid_the_creation_time_tells_boxes_of_one_name_apart() -> None:
    first = alias(HERE, _box())
    assert first == alias(HERE, _box())
    assert alias(HERE, _box(created_at="2026-12-04T08:00:01Z")) != first


def test_the_recovery_command_quotes_a_path_with_spaces() -> None:
    message = changed_message("nb-ada-cpu", "devbox-nb-ada-cpu-0123456789abcdef", Path("/a b/kh"))
    assert "`ssh-keygen -R devbox-nb-ada-cpu-0123456789abcdef -f '/a b/kh'`" in message
