"""Bookings on the testbed: a kwok node with two devices of its own, people signed in
through the testbed's issuer, and the controller keeping each booking it admitted."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from devboxes_controller.box import naming
from devboxes_controller.k8s.timestamps import format_timestamp
from devboxes_testbed.controller import Controller
from devboxes_testbed.issuer import CLI_CLIENT_ID, Issuer
from kubernetes import client
from support import DevicePool, StartController, wait_for

from devboxes_sdk import Client
from devboxes_sdk.errors import Conflict, NotFound, ValidationError
from devboxes_sdk.models import BookingState, DevboxState

PROFILE = DevicePool.PROFILE
# The pool fixture's node offers two devices.
POOL_DEVICES = 2


@pytest.fixture
def controller(
    start_controller: StartController, pool: DevicePool, issuer: Issuer, namespace: str
) -> Controller:
    """A controller of the pool's profile whose people sign in with the testbed's issuer;
    olivia is an admin there, so she sees every booking."""
    settings = pool.settings(namespace)
    settings["auth"] = {
        "oidc": {"issuer": issuer.url, "audience": CLI_CLIENT_ID},
        "adminGroups": ["gpu-admins"],
    }
    settings["bookings"] = {"graceMinutes": 1}
    return start_controller(settings)


@pytest.fixture
def people(controller: Controller, issuer: Issuer) -> dict[str, Client]:
    return {p: Client(controller.url, issuer.token_for(p)) for p in ("alice", "bob", "olivia")}


def _running(person: Client, name: str, ttl_hours: int) -> None:
    person.create(name, gpu=PROFILE, ttl_hours=ttl_hours)
    wait_for(lambda: person.get(name).state is DevboxState.READY, timeout=120)


HOUR = timedelta(hours=1)


def _minute(offset: timedelta) -> datetime:
    return (datetime.now(UTC) + offset).replace(second=0, microsecond=0)


def _gated(kube: Any, namespace: str, box: str) -> bool:
    pods = client.CoreV1Api(kube).list_namespaced_pod(
        namespace, label_selector=f"devboxes.io/box={box}"
    )
    return any(p.spec.scheduling_gates for p in pods.items)


def test_bookings_are_admitted_while_they_fit_and_an_extend_that_would_break_one_is_refused(
    controller: Controller, people: dict[str, Client]
) -> None:
    # olivia is an admin of the testbed's issuer: she sees every booking.
    alice, bob, olivia = people["alice"], people["bob"], people["olivia"]
    soon = _minute(timedelta(hours=2))
    first = alice.bookings.create(PROFILE, soon, 2)
    second = bob.bookings.create(PROFILE, soon + timedelta(hours=1), 2)
    assert (first.state, second.state) == (BookingState.BOOKED, BookingState.BOOKED)
    assert first.message.startswith(f"Booked: {PROFILE} from ")

    # From soon + 1 h to soon + 2 h both devices are promised: a third booking there is
    # refused, naming the earliest window that fits, which is then accepted.
    with pytest.raises(Conflict) as refused:
        olivia.bookings.create(PROFILE, soon + timedelta(minutes=90), 1)
    fits = soon + timedelta(hours=2)
    assert refused.value.detail.endswith(
        f"the earliest window of 1 h that fits starts at {fits:%Y-%m-%d %H:%M} UTC"
    )
    assert olivia.bookings.create(PROFILE, fits, 1).starts_at == fits

    # Running into the full hour is refused, naming the bookings that hold it.
    _running(olivia, "olivias", ttl_hours=1)
    olivia.extend("olivias", 1)
    with pytest.raises(Conflict) as crossing:
        olivia.extend("olivias", 2)
    assert crossing.value.detail.startswith("olivias cannot run past ")
    assert first.name in crossing.value.detail
    assert second.name in crossing.value.detail

    # Each person sees their own, an admin everyone's; a cancel frees the window.
    assert [b.name for b in bob.bookings.list()] == [second.name]
    assert len(olivia.bookings.list()) == 3
    with pytest.raises(NotFound):
        bob.bookings.cancel(first.name)
    assert alice.bookings.cancel(first.name).state is BookingState.RELEASED
    assert bob.bookings.create(PROFILE, soon, 1).state is BookingState.BOOKED

    # What cannot be kept or makes no sense is refused before anything is written.
    with pytest.raises(ValidationError) as past:
        alice.bookings.create(PROFILE, _minute(-timedelta(hours=1)), 1)
    assert past.value.errors[0].loc == ["body", "starts_at"]
    with pytest.raises(ValidationError) as long:
        alice.bookings.create(PROFILE, soon, 13)
    assert "must be at most 12" in long.value.errors[0].msg
    with pytest.raises(NotFound):
        alice.bookings.create("no-such-gpu", soon, 1)
    with pytest.raises(Conflict) as operator:
        Client(controller.url, controller.token).bookings.create(PROFILE, soon, 1)
    assert "operator token books nothing" in operator.value.detail


def test_at_the_window_the_booked_box_gets_a_device_while_three_others_wait(
    people: dict[str, Client], kube: Any, namespace: str
) -> None:
    alice, bob, olivia = people["alice"], people["bob"], people["olivia"]
    _running(olivia, "olivias", ttl_hours=1)

    booking = bob.bookings.create(PROFILE, datetime.now(UTC), 1)
    assert booking.state is BookingState.OPEN
    others = ("first", "second", "third")
    for name in others:
        alice.create(name, gpu=PROFILE)
    # One device is free, but it is bob's for the hour: alice's three wait at the gate.
    wait_for(lambda: all(_gated(kube, namespace, name) for name in others))
    bob.create("bobs", gpu=PROFILE)
    wait_for(lambda: bob.get("bobs").state is DevboxState.READY, timeout=120)
    for name in others:
        assert alice.get(name).state is DevboxState.STARTING
        assert _gated(kube, namespace, name)
    # Each says why, rather than a place in a line that does not move.
    summary = wait_for(
        lambda: (found := alice.get("first").summary) and "booking" in found and found
    )
    assert summary.startswith("Waiting for a Pool GPU no booking needs: bob booked pool-gpu from ")
    assert booking.name in summary
    used = wait_for(
        lambda: (found := bob.bookings.list()[0]).state is BookingState.USED and found,
        timeout=30,
    )
    assert used.used_by == "bobs"

    # Once olivia's box stops, her device goes to the line: bob's booking is his box's.
    olivia.stop("olivias")
    wait_for(lambda: sum(not _gated(kube, namespace, name) for name in others) == 1)


def test_a_booking_nobody_uses_is_released_after_the_grace_time(people: dict[str, Client]) -> None:
    bob = people["bob"]
    booking = bob.bookings.create(PROFILE, datetime.now(UTC), 1)
    # What the controller answered for is what it lists next, whatever its cache lags.
    assert [b.name for b in bob.bookings.list()] == [booking.name]
    released = wait_for(
        lambda: (found := bob.bookings.list()[0]).state is BookingState.RELEASED and found,
        timeout=120,
    )
    assert released.name == booking.name
    assert released.message.endswith(
        "no box of it had the device within 1 min of the window's opening."
    )


def test_a_booked_box_stopped_when_the_window_opens_is_started_for_it_once(
    people: dict[str, Client], kube: Any, namespace: str
) -> None:
    bob = people["bob"]
    _running(bob, "train", ttl_hours=2)
    bob.stop("train")
    wait_for(lambda: bob.get("train").state is DevboxState.STOPPED, timeout=120)

    # The window is open from the start: the leader's next pass starts the box.
    booking = bob.bookings.create(PROFILE, datetime.now(UTC), 1, box="train")
    wait_for(lambda: bob.get("train").state is DevboxState.READY, timeout=120)
    used = wait_for(
        lambda: (found := bob.bookings.list()[0]).state is BookingState.USED and found,
        timeout=30,
    )
    assert (used.name, used.used_by) == (booking.name, "train")
    events = client.CoreV1Api(kube).list_namespaced_event(
        namespace, field_selector="reason=BookingStarted"
    )
    (event,) = events.items
    assert event.message.startswith(f"Started for booking {booking.name}: {PROFILE} from ")

    # Stopped by its person inside the window, it stays stopped.
    bob.stop("train")
    wait_for(lambda: bob.get("train").state is DevboxState.STOPPED, timeout=120)
    time.sleep(12)
    assert bob.get("train").state is DevboxState.STOPPED


def test_a_promise_broken_by_a_write_the_admission_did_not_see_is_kept_by_a_cut(
    people: dict[str, Client], kube: Any, namespace: str
) -> None:
    alice, bob, olivia = people["alice"], people["bob"], people["olivia"]
    _running(olivia, "olivias", ttl_hours=1)
    _running(bob, "bobs", ttl_hours=3)
    # One device is free from olivia's stop on: alice books it from 2 h on.
    opens = _minute(timedelta(hours=2))
    booking = alice.bookings.create(PROFILE, opens, 1)

    # An extend of olivia's box written by another replica as the booking was admitted
    # (each checked what its own cache had): at the opening, three units for two devices.
    client.AppsV1Api(kube).patch_namespaced_deployment(
        "devbox-olivias",
        namespace,
        {
            "metadata": {
                "annotations": {naming.ANNOTATION_EXPIRES_AT: format_timestamp(opens + 3 * HOUR)}
            }
        },
    )
    # The leader cuts the box that would run longest into the window to its opening.
    cut = wait_for(lambda: (box := olivia.get("olivias")).expires_at == opens and box, timeout=60)
    assert cut.state is DevboxState.READY
    assert bob.get("bobs").expires_at != opens
    events = client.CoreV1Api(kube).list_namespaced_event(
        namespace, field_selector="reason=TimeToLiveCut"
    )
    (event,) = events.items
    assert event.involved_object.name == "devbox-olivias"
    assert booking.name in event.message
