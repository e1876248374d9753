"""`make up`'s people file: each identity provider adds its people's tokens to it."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from devboxes_testbed.errors import TestbedError
from devboxes_testbed.stack import merge_people


def test_entries_are_added_to_those_already_there(tmp_path: Path) -> None:
    path = tmp_path / "people.json"
    merge_people(path, {"alice": "hub-token-a", "carol": "hub-token-c"})
    merge_people(path, {"alice": "oidc-token-a", "bob": "oidc-token-b"})
    assert json.loads(path.read_text()) == {
        "alice": "oidc-token-a",
        "carol": "hub-token-c",
        "bob": "oidc-token-b",
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["people.json"]


def test_a_file_written_readable_by_others_is_replaced_by_one_that_is_not(
    tmp_path: Path,
) -> None:
    path = tmp_path / "people.json"
    path.write_text('{"carol": "hub-token-c"}')
    path.chmod(0o644)
    merge_people(path, {"bob": "oidc-token-b"})
    assert json.loads(path.read_text()) == {"carol": "hub-token-c", "bob": "oidc-token-b"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"alice": 1}'])
def test_a_file_of_something_else_is_named_and_left_alone(tmp_path: Path, content: str) -> None:
    path = tmp_path / "people.json"
    path.write_text(content)
    with pytest.raises(TestbedError, match=f"{path}.*remove it"):
        merge_people(path, {"bob": "oidc-token-b"})
    assert path.read_text() == content
