"""The testbed's JupyterHub as `make up` offers it: three people, each with a token the
controller's hub verifier knows as them."""

from __future__ import annotations

import asyncio

from devboxes_controller.web.identity.base import Identity
from devboxes_controller.web.identity.hub import HubVerifier
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
