"""When a new box of a GPU profile would get a device: from the profile's free count, the
boxes waiting for it, and the time-to-live ends of the boxes that hold its devices.

Pure. A new box is counted behind every box already waiting for the profile, so it gets
the device that the ``waiting - free + 1``-th stop frees, counting the holders' stops from
the earliest. Each holder stops at its time to live's end at the latest, which the
controller enforces: when every device of the profile is free or held by a box of it,
and no other profile asks for the same devices, the answer is the latest as things
stand. It comes sooner when a box stops or idles early or a waiting box goes, and later
only when the owner of a box ahead extends it, or when someone holding fewer of these
devices joins the line first (the line favours them). Otherwise it is an estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from devboxes_sdk.models import ProfileAvailability, ProfileWhen

from ..k8s.timestamps import minute_label
from .ledger import Ledger


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def when(
    availability: ProfileAvailability,
    holders: Sequence[datetime],
    now: datetime,
    *,
    shared: bool,
    dra: bool = False,
) -> ProfileWhen:
    """``holders``: the time-to-live ends of the running boxes of the profile that hold a
    device; ``shared``: another profile asks for the same devices; ``dra``: the profile's
    devices are DRA devices, which the scheduler hands out, not the controller's line."""
    name, free, waiting = availability.name, availability.available, availability.waiting
    if free is None or availability.capacity is None:
        why = availability.reason or "the controller cannot count this profile's devices"
        return ProfileWhen(name=name, basis=f"Unknown: {why}.")
    complete = not shared and not dra and free + len(holders) >= availability.capacity
    if free > waiting:
        ahead = f", {waiting} waiting" if waiting else ""
        return ProfileWhen(
            name=name,
            free_at=now,
            bound=complete,
            basis=f"Now: {free} of {availability.capacity} free{ahead}.",
        )
    turn = waiting - free + 1
    stops = sorted(holders)
    if turn > len(stops):
        return ProfileWhen(
            name=name,
            basis=(
                f"Unknown: {waiting} waiting for {len(stops)} boxes that hold these "
                "devices; pods that are not boxes hold the others, and the controller "
                "does not know when they end."
            ),
        )
    at = stops[turn - 1]
    place = f"the {_ordinal(turn)} of the {len(stops)} boxes holding one"
    ahead = f" ({waiting} waiting ahead)" if waiting else ""
    if complete:
        basis = (
            f"By {minute_label(at)} at the latest: {place} reaches the end of its time to "
            f"live then{ahead}; sooner if a box stops earlier, later only if its owner "
            "extends it or someone holding fewer of these devices joins the line first."
        )
    else:
        if dra:
            others = "the scheduler, not the controller's line, hands out DRA devices"
        elif shared:
            others = "another profile asks for the same devices"
        else:
            others = "pods that are not boxes hold some of these devices"
        basis = (
            f"About {minute_label(at)}, an estimate: {place} reaches the end of its time to "
            f"live then{ahead}, but {others}."
        )
    return ProfileWhen(name=name, free_at=at, bound=complete, basis=basis)


def after_bookings(
    answer: ProfileWhen, ledger: Ledger, run: timedelta, latest: datetime
) -> ProfileWhen:
    """The answer moved past the bookings: a box given a device must be able to run
    ``run`` before any booking it would break, so the device is not its until then."""
    if answer.free_at is None:
        return answer
    fits = ledger.earliest(answer.free_at, run, latest)
    if fits == answer.free_at:
        return answer
    if fits is None:
        return ProfileWhen(
            name=answer.name,
            basis=(
                f"Unknown: bookings hold every device of the profile from "
                f"{minute_label(answer.free_at)} to past {minute_label(latest)}."
            ),
        )
    return ProfileWhen(
        name=answer.name,
        free_at=fits,
        bound=False,
        basis=(
            f"About {minute_label(fits)}, an estimate: a device comes free sooner, but bookings "
            f"hold it until then (devbox bookings lists yours)."
        ),
    )
