"""Plain-text rendering for the ``devbox`` CLI: tables, relative times, box details."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from devboxes_sdk._cli_base import clean
from devboxes_sdk.client import Devbox
from devboxes_sdk.labels import (
    accelerator_label,
    allocated_label,
    auto_stop_label,
    duration,
    next_free_label,
    status_line,
)
from devboxes_sdk.models import (
    PREVIEW_PATH,
    Booking,
    DevboxState,
    DoctorReport,
    GpuAvailability,
    GpuCapabilities,
    GpuWhen,
    ImageAllocation,
    ImageCapabilities,
    ImagePort,
    SshKey,
    UsageLine,
    UsageReport,
    Volume,
    WhoAmI,
)

BOX_HEADERS = ("NAME", "STATE", "SIZE", "AUTO-STOP", "ACCELERATOR", "SSH")
PROFILE_HEADERS = ("PROFILE", "NAME", "COUNT", "RESOURCE", "FREE", "WAITING", "DESCRIPTION")
IMAGE_HEADERS = ("PROFILE", "NAME", "MODE", "PORTS", "DESCRIPTION")
DOCTOR_HEADERS = ("VERDICT", "PROFILE", "CHECK", "FINDING")
VOLUME_HEADERS = ("NAME", "SIZE", "CREATED", "LAST PROFILE", "CLAIM")
KEY_HEADERS = ("FINGERPRINT", "TYPE", "COMMENT", "ADDED")
USAGE_HEADERS = ("ALLOCATED H", "BUSY H", "IDLE H", "UNKNOWN H", "BUSY SHARE", "WAITED H")
# The fields of a usage line, in the order of the CSV's columns: seconds first, then hours.
USAGE_SECONDS = ("allocated", "busy", "idle", "unknown", "waiting")
# Parenthesized like the report's own "(none)" group, so no profile, box or person's name
# can be mistaken for it.
USAGE_TOTAL = "(total)"
EMPTY = "-"

# The scheduler's sentence: "0/7 nodes are available: 2 Insufficient nvidia.com/gpu,
# 5 node(s) didn't match Pod's node affinity/selector. preemption: ...". The counted
# clauses run from the colon to the first full stop.
_NODES_AVAILABLE = re.compile(r"\d+/\d+ nodes are available: ")
_CLAUSE_END = re.compile(r"\.(?:\s|$)")
_CLAUSE_COUNT = re.compile(r"^\d+\s+")
# A missing resource is the reason a user can act on (wait, or pick another profile),
# so it wins over clauses about nodes the box was never meant for.
_SHORTAGE = "Insufficient "
# Right after a create the scheduler can see the pod before the home volume's claim is
# bound and says so; it resolves itself within seconds and is not a scheduling problem.
_UNBOUND_CLAIMS = "unbound immediate PersistentVolumeClaims"
STORAGE_PENDING = "Waiting for the home volume."


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces, without trailing blanks."""
    lines = [list(headers), *([clean(cell) for cell in row] for row in rows)]
    widths = [max(len(line[column]) for line in lines) for column in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def relative_time(moment: datetime, now: datetime) -> str:
    """``in 23h`` for the future, ``5m ago`` for the past, ``now`` within a second."""
    seconds = (moment - now).total_seconds()
    if abs(seconds) < 1:
        return "now"
    if seconds > 0:
        return f"in {duration(seconds)}"
    return f"{duration(-seconds)} ago"


Row = tuple[str, ...]


def box_row(box: Devbox, now: datetime) -> Row:
    return (
        box.name,
        box.state.value,
        box.preset,
        auto_stop_label(box.state, box.expires_at, now, box.stop_warning),
        accelerator_label(box.gpu),
        box.ssh_command or EMPTY,
    )


def shows_owners(items: Iterable[Devbox | Volume], me: WhoAmI) -> bool:
    """Whether a list of boxes or volumes needs an OWNER column: when it holds one of
    someone else's (an admin's list can); a list of the caller's own would repeat their
    name."""
    return any(item.owner != me.user for item in items)


def owner_column(
    headers: Row, rows: Sequence[Row], items: Sequence[Devbox | Volume]
) -> tuple[Row, list[Row]]:
    """The table with an OWNER column after the first: each row's item's owner."""
    return (
        (headers[0], "OWNER", *headers[1:]),
        [(row[0], item.owner, *row[1:]) for row, item in zip(rows, items, strict=True)],
    )


def cluster_column(
    headers: Row, rows: Sequence[Row], clusters: Sequence[str] | None
) -> tuple[Row, list[Row]]:
    """The table with a CLUSTER column first when ``clusters`` gives each row's cluster."""
    if clusters is None:
        return headers, list(rows)
    return (
        ("CLUSTER", *headers),
        [(cluster, *row) for cluster, row in zip(clusters, rows, strict=True)],
    )


def boxes_table(
    boxes: Sequence[Devbox],
    now: datetime,
    *,
    owners: bool = False,
    clusters: Sequence[str] | None = None,
) -> str:
    """The list of boxes; a CLUSTER column first when ``clusters`` gives each box's, an
    OWNER column after the name when ``owners``, and a REASON column (each box's
    summary) when any box is starting or degraded, the states that have one."""
    headers: Row = BOX_HEADERS
    rows = [box_row(box, now) for box in boxes]
    if owners:
        headers, rows = owner_column(headers, rows, boxes)
    if any(box.summary for box in boxes):
        headers = (*headers, "REASON")
        rows = [(*row, box.summary or EMPTY) for row, box in zip(rows, boxes, strict=True)]
    return table(*cluster_column(headers, rows, clusters))


def free_text(availability: GpuAvailability | None, name: str) -> tuple[str, str]:
    """FREE ("1 of 2", or "?" when the server cannot count) and WAITING for one profile."""
    entry = availability.profile(name) if availability is not None else None
    if entry is None:
        return EMPTY, EMPTY
    if entry.available is None or entry.capacity is None:
        return "?", str(entry.waiting)
    return f"{entry.available} of {entry.capacity}", str(entry.waiting)


def next_free_text(found: GpuWhen | None, name: str) -> str:
    """NEXT FREE for one profile; ``?`` without an answer."""
    if found is None:
        return "?"
    return next_free_label(found.profile(name), found.observed_at)


def profiles_table(
    catalog: GpuCapabilities,
    availability: GpuAvailability | None,
    found: GpuWhen | None = None,
) -> str:
    """The catalog with each profile's free count and line; with ``found``, a NEXT FREE
    column beside them."""
    return clusters_profiles_table([(None, catalog, availability, found)])


ClusterCatalog = tuple[str | None, GpuCapabilities, GpuAvailability | None, GpuWhen | None]


def clusters_profiles_table(catalogs: Sequence[ClusterCatalog]) -> str:
    """Each cluster's catalog, with its own free counts (never summed across clusters):
    a CLUSTER column first when the catalogs name their clusters, and a NEXT FREE column
    when any of them says when devices come free."""
    named = any(cluster is not None for cluster, *_ in catalogs)
    timed = any(found is not None for *_, found in catalogs)
    rows: list[Row] = []
    clusters: list[str] = []
    for cluster, catalog, availability, found in catalogs:
        for row in _profile_rows(catalog, availability, found, timed):
            rows.append(row)
            clusters.append(cluster or EMPTY)
    headers: Row = PROFILE_HEADERS
    if timed:
        headers = (*headers[:-1], "NEXT FREE", headers[-1])
    text = table(*cluster_column(headers, rows, clusters if named else None))
    reasons = sorted(
        {
            (f"{cluster}: " if cluster else "") + p.reason
            for cluster, _, availability, _ in catalogs
            if availability is not None
            for p in availability.profiles
            if p.capacity is None and p.reason
        }
    )
    return "\n".join([text, *(f"\nFREE is unknown: {clean(r)}" for r in reasons)])


def _profile_rows(
    catalog: GpuCapabilities,
    availability: GpuAvailability | None,
    found: GpuWhen | None,
    timed: bool,
) -> list[Row]:
    rows: list[Row] = []
    for profile in catalog.profiles:
        free, waiting = free_text(availability, profile.name)
        when = (next_free_text(found, profile.name),) if timed else ()
        rows.append(
            (
                f"{profile.name} (default)" if profile.default else profile.name,
                profile.display_name,
                str(profile.count),
                (profile.devices or EMPTY) if profile.kind == "dra" else profile.resource_name,
                free,
                waiting,
                *when,
                profile.description or EMPTY,
            )
        )
    return rows


def when_text(found: GpuWhen) -> str:
    """One line per profile: its name, then the controller's sentence."""
    return "\n".join(f"{clean(p.name)}: {clean(p.basis)}" for p in found.profiles)


BOOKING_HEADERS = ("NAME", "PROFILE", "FROM", "TO", "STATE", "BOX")


def _minute(moment: datetime) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M")


def bookings_table(bookings: Sequence[Booking], owners: bool) -> str:
    """One row per booking, times in the local zone; an OWNER column for an admin's view."""
    headers = ("OWNER", *BOOKING_HEADERS) if owners else BOOKING_HEADERS
    rows = []
    for b in bookings:
        row = [
            b.name,
            b.profile,
            _minute(b.starts_at),
            _minute(b.ends_at),
            b.state.value,
            b.used_by or b.box or EMPTY,
        ]
        rows.append([b.owner, *row] if owners else row)
    return table(headers, rows)


def ports_text(ports: Sequence[ImagePort]) -> str:
    """``http 8080/TCP, metrics 9090/TCP``: the pod-local ports of an image profile."""
    return ", ".join(f"{p.name} {p.container_port}/{p.protocol}" for p in ports) or EMPTY


def images_table(catalog: ImageCapabilities) -> str:
    return table(
        IMAGE_HEADERS,
        (
            (p.name, p.display_name, p.mode, ports_text(p.ports), p.description or EMPTY)
            for p in catalog.profiles
        ),
    )


def image_text(image: ImageAllocation | None) -> str:
    """``Docs preview (docs, sidecar; ports http 8080/TCP)``, or ``-`` without one."""
    if image is None:
        return EMPTY
    ports = f"; ports {ports_text(image.ports)}" if image.ports else ""
    return f"{image.display_name} ({image.profile}, {image.mode}{ports})"


def preview_links(box: Devbox, controller_url: str) -> list[str]:
    """Where a browser opens each TCP port the box's image profile declares."""
    ports = box.image.ports if box.image is not None else []
    return [
        controller_url.rstrip("/") + PREVIEW_PATH.format(name=box.name, port=port.container_port)
        for port in ports
        if port.protocol == "TCP"
    ]


def doctor_text(report: DoctorReport) -> str:
    """The doctor's findings, one line each with its fix, and a closing verdict."""
    rows = [
        (
            check.verdict.upper(),
            check.profile or EMPTY,
            check.check,
            f"{check.message}: {check.fix}"
            if check.fix and check.verdict != "pass"
            else check.message,
        )
        for check in report.checks
    ]
    failed = sum(1 for c in report.checks if c.verdict == "fail")
    warned = sum(1 for c in report.checks if c.verdict == "warn")
    verdict = "all checks passed" if report.ok else f"{failed} check(s) failed"
    if warned:
        verdict += f", {warned} warning(s)"
    return f"{table(DOCTOR_HEADERS, rows)}\n\n{verdict}"


def volumes_table(
    volumes: Sequence[Volume],
    now: datetime,
    *,
    owners: bool = False,
    clusters: Sequence[str] | None = None,
) -> str:
    """The retained home volumes; a CLUSTER column first when ``clusters`` gives each
    volume's, an OWNER column after the name when ``owners``."""
    headers: Row = VOLUME_HEADERS
    rows: list[Row] = [
        (
            volume.name,
            volume.size or EMPTY,
            relative_time(volume.created_at, now),
            volume.last_profile or "cpu",
            volume.claim,
        )
        for volume in volumes
    ]
    if owners:
        headers, rows = owner_column(headers, rows, volumes)
    return table(*cluster_column(headers, rows, clusters))


def keys_table(keys: Iterable[SshKey]) -> str:
    return table(
        KEY_HEADERS,
        (
            (key.fingerprint, key.algorithm, key.comment or EMPTY, key.added_at.date().isoformat())
            for key in keys
        ),
    )


def activity_text(box: Devbox, now: datetime) -> str:
    """``idle for 23m; stops in 37m``, ``active``, or why nothing is known."""
    activity = box.activity
    if activity is None:
        return EMPTY
    if activity.state == "unknown":
        return "unknown (no activity agent reports; never stopped for idleness)"
    if activity.state == "active" or activity.idle_since is None:
        return "active"
    idle = f"idle for {duration((now - activity.idle_since).total_seconds())}"
    if activity.stops_at is None:
        return idle
    if activity.stops_at <= now:
        return f"{idle}; stops now"
    return f"{idle}; stops {relative_time(activity.stops_at, now)}"


def box_details(box: Devbox, now: datetime, controller_url: str) -> str:
    """Every field of one box as aligned ``Key: value`` lines."""
    expires = EMPTY
    # A warned stop may come before the time to live's end: an idle one does.
    stops_at = box.stop_warning.stops_at if box.stop_warning else box.expires_at
    if stops_at is not None:
        stamp = stops_at.isoformat(timespec="seconds")
        expires = (
            stamp
            if box.state is DevboxState.STOPPED
            else f"{stamp} ({auto_stop_label(box.state, box.expires_at, now, box.stop_warning)})"
        )
    fields = [
        ("Name", box.name),
        ("Owner", box.owner),
        ("State", box.state.value),
        ("Summary", box.summary or EMPTY),
        ("Message", box.message or EMPTY),
        ("Size", box.preset),
        ("Accelerator", accelerator_label(box.gpu)),
        ("GPU profile", box.gpu.profile if box.gpu else EMPTY),
        ("Image", image_text(box.image)),
        *(
            [("Allocated", allocated_label(box.gpu.allocated))]
            if box.gpu and box.gpu.allocated
            else []
        ),
        (
            "Created",
            f"{box.created_at.isoformat(timespec='seconds')} "
            f"({relative_time(box.created_at, now)})",
        ),
        ("Auto-stop", expires),
        *([("Warning", box.stop_warning.message)] if box.stop_warning else []),
        ("SSH", box.ssh_command or EMPTY),
        ("Previews", " ".join(preview_links(box, controller_url)) or EMPTY),
        ("Repository", box.repository or EMPTY),
        ("Storage", box.storage_size or EMPTY),
        ("Pod", box.pod_name or EMPTY),
        ("Pod ready", "yes" if box.pod_ready else "no"),
        ("Restarts", str(box.restarts)),
        ("Activity", activity_text(box, now)),
        (
            "Restart",
            f"required: {box.restart_reason or 'the release changed'}"
            if box.restart_required
            else "not required",
        ),
    ]
    width = max(len(key) for key, _ in fields) + 1
    return "\n".join(f"{key + ':':<{width}} {clean(value)}" for key, value in fields)


def short_reason(message: str) -> str:
    """The gist of a box's message, for one line of progress.

    A scheduler sentence is cut to one reason without its count, e.g.
    ``Scheduling blocked: Insufficient nvidia.com/gpu``; ``devbox status`` shows it all.
    Other messages are returned as they are.
    """
    found = _NODES_AVAILABLE.search(message)
    if found is None:
        return message
    rest = message[found.end() :]
    end = _CLAUSE_END.search(rest)
    clauses = [clause.strip() for clause in rest[: end.start() if end else None].split(",")]
    clauses = [clause for clause in clauses if clause]
    if not clauses:
        return message
    chosen = next((clause for clause in clauses if _SHORTAGE in clause), clauses[0])
    return message[: found.start()] + _CLAUSE_COUNT.sub("", chosen)


def progress_reason(box: Devbox) -> str | None:
    """What a box waits for, short enough for a progress line.

    A starting GPU box's summary comes first: while it waits for a device it holds the
    free count and the estimated place in line, which the scheduler's sentence lacks.
    A CPU box keeps the gist of the scheduler's sentence, which says more than its summary.
    """
    if box.state is DevboxState.STARTING and box.gpu is not None and box.summary:
        return box.summary
    if not box.message:
        return None
    if box.state is DevboxState.STARTING and _UNBOUND_CLAIMS in box.message:
        return STORAGE_PENDING
    return short_reason(box.message)


def progress_line(box: Devbox) -> str:
    """One line describing where a box is on its way to ready."""
    return clean(f"{box.name}: {status_line(box.state, progress_reason(box))}")


def fit(text: str, width: int, ellipsis: str = "…") -> str:
    """``text`` cut to ``width`` characters, marking the cut with ``ellipsis``."""
    if len(text) <= width:
        return text
    return text[: max(width - len(ellipsis), 0)] + ellipsis


def hours(seconds: int, decimals: int) -> str:
    """Seconds as hours, halves rounded up (900 s is 0.3 h to one decimal, as people round,
    where a float's format would round it to the even 0.2)."""
    exact = Decimal(seconds) / 3600
    return str(exact.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP))


def busy_share_text(line: UsageLine) -> str:
    share = line.busy_share
    return EMPTY if share is None else f"{share:.0%}"


def usage_row(key: str, line: UsageLine) -> Row:
    return (
        key,
        hours(line.allocated_seconds, 1),
        hours(line.busy_seconds, 1),
        hours(line.idle_seconds, 1),
        hours(line.unknown_seconds, 1),
        busy_share_text(line),
        hours(line.waiting_seconds, 1),
    )


def usage_table(report: UsageReport) -> str:
    """One row per line of the report, hours with one decimal; a total row when there is
    more than one line (group lines may add up to more than it: see ``UsageLine``)."""
    rows = [usage_row(line.key, line) for line in report.lines]
    if len(report.lines) > 1:
        rows.append(usage_row(USAGE_TOTAL, report.total))
    return table((report.group_by.upper(), *USAGE_HEADERS), rows)


def last_day(report: UsageReport) -> date:
    """The last UTC day a report covers: its ``until`` is the midnight after it."""
    return (report.until.astimezone(UTC) - timedelta(days=1)).date()


def usage_span(report: UsageReport) -> str:
    first = report.since.astimezone(UTC).date()
    return f"{first.isoformat()} to {last_day(report).isoformat()}"


def recorded_text(reports: Sequence[UsageReport]) -> str:
    """How far the recording reached: the time alone when that is on the last day the
    reports cover, with its date otherwise."""
    reached = [r.recorded_until.astimezone(UTC) for r in reports if r.recorded_until]
    if not reached:
        return "nothing is recorded in this span yet"
    moment = max(reached)
    if moment.date() == max(last_day(report) for report in reports):
        return f"recorded until {moment:%H:%M} UTC"
    return f"recorded until {moment:%Y-%m-%d %H:%M} UTC"


def usage_text(spans: Sequence[tuple[str, UsageReport]]) -> str:
    """Each report's span, after its title when it has one, and its table, under whose
    usage it is, then how far the recording reached."""
    first = spans[0][1]
    whose = "Everyone's GPU usage" if first.scope is None else f"GPU usage of {clean(first.scope)}"
    blocks = [f"{whose}, by {first.group_by}"]
    for title, report in spans:
        body = usage_table(report) if report.lines else "No GPU usage."
        span = usage_span(report)
        blocks.append(f"{title} ({span}):\n{body}" if title else f"{span}:\n{body}")
    reports = [report for _, report in spans]
    blocks.append(f"Reports are whole UTC days; {recorded_text(reports)}.")
    return "\n\n".join(blocks)


def usage_csv(report: UsageReport) -> str:
    """A header, then one line per line of the report: its seconds as the JSON gives them,
    the same as hours with two decimals, the busy share of the known seconds (empty when
    none is known), and the people and boxes it covers."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        [
            report.group_by,
            *(f"{name}_seconds" for name in USAGE_SECONDS),
            *(f"{name}_hours" for name in USAGE_SECONDS),
            "busy_share",
            "people",
            "boxes",
        ]
    )
    for line in report.lines:
        seconds = [getattr(line, f"{name}_seconds") for name in USAGE_SECONDS]
        share = line.busy_share
        writer.writerow(
            [
                line.key,
                *seconds,
                *(hours(value, 2) for value in seconds),
                "" if share is None else f"{share:.4f}",
                line.people,
                line.boxes,
            ]
        )
    return out.getvalue()
