"""The testbed's JupyterHub as `make up` offers it: three people, each with a token the
controller's hub verifier knows as them, written to a file only its owner may read."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import pytest
from devboxes_controller.web.hub import HubVerifier
from devboxes_controller.web.people import Identity
from devboxes_testbed import __main__ as command
from devboxes_testbed.hub import Hub, hub_people


def test_each_person_gets_a_token_that_names_them(hub: Hub) -> None:
    people = hub_people(hub)
    assert sorted(people) == ["alice", "bob", "olivia"]

    async def identities() -> dict[str, Identity | None]:
        verifier = HubVerifier(hub.api_url, 30, admin_groups=["gpu-admins"])
        try:
            return {name: await verifier.identify(token) for name, token in people.items()}
        finally:
            await verifier.aclose()

    assert asyncio.run(identities()) == {
        "alice": Identity("alice", "hub", ("ml",)),
        "bob": Identity("bob", "hub", ("vision",)),
        "olivia": Identity("olivia", "hub", ("gpu-admins",), admin=True),
    }


def test_the_people_file_is_json_for_its_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(command, "STATE", tmp_path / "state")
    monkeypatch.setattr(command, "PEOPLE_FILE", tmp_path / "state" / "people.json")
    # An earlier file, readable by others, is replaced, not reused.
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "people.json").write_text("{}")
    (tmp_path / "state" / "people.json").chmod(0o644)
    command.write_people({"alice": "a" * 32, "bob": "b" * 32})
    written = tmp_path / "state" / "people.json"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert json.loads(written.read_text()) == {"alice": "a" * 32, "bob": "b" * 32}
