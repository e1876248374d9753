"""The Devboxes wire contract: every request and response body of ``/api/v1``.

This module is the single source of truth. The controller serves exactly these models
and the SDK parses exactly these models, so the two cannot drift apart.

Request models forbid unknown fields (servers reject them); response models ignore
unknown fields (servers may add some).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, field_validator

# The API prefix and the name rule are kept where they need no pydantic (see _wire).
from devboxes_sdk._wire import API_PREFIX as API_PREFIX
from devboxes_sdk._wire import BLANKS as BLANKS
from devboxes_sdk._wire import NAME_PATTERN as NAME_PATTERN
from devboxes_sdk._wire import NAME_RE as NAME_RE
from devboxes_sdk._wire import NAME_RULE as NAME_RULE
from devboxes_sdk._wire import normalize_name as normalize_name

# Where the dashboard opens a port a box's image profile declares (a web preview), for
# the box's owner or an admin signed in to it.
PREVIEW_PATH = "/dashboard/devboxes/{name}/ports/{port}/"
# ``GET {API_PREFIX}/devboxes/{name}?wait=ready&timeout=S`` holds the request until the
# box is settled; a server that does so says it with this header, valued ``ready``.
WAIT_HEADER = "X-Devboxes-Wait"
# The longest one held request may last; clients wanting longer ask again.
MAX_WAIT_SECONDS = 300
# Sent with a create, so that a retry of it answers the original outcome.
IDEMPOTENCY_HEADER = "Idempotency-Key"

_REPOSITORY = (
    r"(?:https://github\.com/)?[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}?"
    r"(?:\.git)?/?"
)
REPOSITORY_RE = re.compile(f"^{_REPOSITORY}$")
# BLANKS as a pattern: what text fields are trimmed of.
_BLANK = r"[ \t\n\r]*"
# Upper-case ASCII is accepted and folded, as Devboxes clients have always sent it.
NAME_INPUT_PATTERN = f"^{_BLANK}[A-Za-z0-9]([A-Za-z0-9-]{{0,38}}[A-Za-z0-9])?{_BLANK}$"
# Blank means no repository.
REPOSITORY_INPUT_PATTERN = f"^{_BLANK}({_REPOSITORY})?{_BLANK}$"

# Long enough for the image reference of a catalog entry, which Devboxes clients may send
# in place of the profile's name.
MAX_IMAGE_SELECTOR = 512

Preset = Literal["small", "medium", "large"]
PRESETS: tuple[Preset, ...] = ("small", "medium", "large")


class DevboxState(StrEnum):
    """A box's state, derived by the controller from its Kubernetes objects."""

    STARTING = "starting"
    READY = "ready"
    STOPPED = "stopped"
    DEGRADED = "degraded"


def normalize_repository(value: str) -> str | None:
    """Trim a repository to clone and check it; an empty one means none."""
    repository = value.strip(BLANKS)
    if not repository:
        return None
    if not REPOSITORY_RE.fullmatch(repository):
        raise ValueError(
            f"repository must be 'owner/repo' or an https://github.com/ URL, got {value!r}"
        )
    return repository


def _json_number(value: object) -> object:
    """Refuse what JSON Schema does not call a number (`true`, "24"); 148.0 is still 148."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    return value


# A number in a request body is one as JSON Schema defines it; pydantic alone takes true or "24".
JSON_NUMBER = BeforeValidator(_json_number)


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Response(BaseModel):
    model_config = ConfigDict(extra="ignore")


class GpuRequest(_Request):
    """The accelerator a create asks for: a profile name, or None for the operator default."""

    profile: str | None = None


class DevboxCreate(_Request):
    """Body of ``POST /api/v1/devboxes``."""

    name: Annotated[str, Field(json_schema_extra={"pattern": NAME_INPUT_PATTERN})]
    preset: Preset = "small"
    ttl_hours: Annotated[int, Field(ge=1), JSON_NUMBER] = 24
    repository: Annotated[
        str | None, Field(json_schema_extra={"pattern": REPOSITORY_INPUT_PATTERN})
    ] = None
    gpu: GpuRequest | None = None
    # An image profile of the operator's catalog, by name; never an image of the client's.
    image: Annotated[str, Field(max_length=MAX_IMAGE_SELECTOR)] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return normalize_name(value)

    @field_validator("repository")
    @classmethod
    def _repository(cls, value: str | None) -> str | None:
        return None if value is None else normalize_repository(value)


# How a profile's devices are requested: a device plugin's extended resource, or a
# Dynamic Resource Allocation claim.
GpuKind = Literal["extended-resource", "dra"]


class GpuProfile(_Response):
    """One profile of the operator's catalog, as discovery shows it.

    ``kind`` tells a DRA profile from one of an extended resource. ``resource_name`` is
    what its devices are requested by: the extended resource, or a DRA profile's device
    class (e.g. ``gpu.nvidia.com``), never null, since Devboxes clients that know only
    extended resources require it. ``devices`` says for people what a DRA profile gives,
    e.g. "NVIDIA H100 80GB, else A100 40GB".
    """

    name: str
    display_name: str
    description: str | None = None
    kind: GpuKind = "extended-resource"
    resource_name: str
    devices: str | None = None
    count: int
    default: bool = False


class GpuCapabilities(_Response):
    """The GPU catalog; a box asking for a GPU without naming one gets ``default_profile``."""

    enabled: bool
    default_profile: str | None = None
    profiles: list[GpuProfile] = Field(default_factory=list)

    def profile(self, name: str) -> GpuProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


ImageMode = Literal["sidecar", "workspace"]
# How people reach a box's sshd: through the controller's tunnel
# (``/api/v1/devboxes/{name}/ssh``), or at the box's own address (``ssh_host``/``ssh_port``).
SshAccess = Literal["tunnel", "service"]
_SERVICE_ONLY: tuple[SshAccess, ...] = ("service",)


class ImagePort(_Response):
    """A port an image profile's container serves inside the box's pod (not a Service)."""

    name: str
    container_port: int
    protocol: str = "TCP"


class ImageProfile(_Response):
    """One operator-approved image, as discovery shows it: never the image reference.

    ``workspace`` replaces the box's main container; ``sidecar`` runs beside it.
    """

    name: str
    display_name: str
    description: str | None = None
    mode: ImageMode
    ports: list[ImagePort] = Field(default_factory=list)
    # The folder of the box's home (relative to it) that a sidecar serves, read-only.
    home_folder: str | None = None


class ImageCapabilities(_Response):
    """The image catalog; empty when the operator disabled image profiles."""

    enabled: bool
    profiles: list[ImageProfile] = Field(default_factory=list)

    def profile(self, name: str) -> ImageProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


class ClusterIdentity(_Response):
    """Which cluster a controller serves: the name its operator gives it, and an id that
    stays the same through every URL that reaches it (the UID of the cluster's
    ``kube-system`` namespace), so a client that knows one cluster by two URLs can tell.
    ``id`` is None when the controller could not read it."""

    name: str | None = None
    id: str | None = None


class Capabilities(_Response):
    """Body of ``GET /api/v1/capabilities``."""

    gpu: GpuCapabilities = Field(
        default_factory=lambda: GpuCapabilities(enabled=False, default_profile=None, profiles=[])
    )
    # Servers from before image profiles send no ``images``: none on offer.
    images: ImageCapabilities = Field(
        default_factory=lambda: ImageCapabilities(enabled=False, profiles=[])
    )
    # Servers from before the tunnel send none: only the box's own address.
    ssh_access: list[SshAccess] = Field(default_factory=lambda: list(_SERVICE_ONLY))
    # Servers from before cluster identity send none: a client cannot tell two URLs apart.
    cluster: ClusterIdentity | None = None


class AllocatedDevice(_Response):
    """One device Kubernetes allocated to a DRA box.

    ``alternative`` is 0 for the profile's own device and n for its n-th alternative;
    ``product`` and ``memory`` are None when the device does not publish them.
    """

    product: str | None = None
    memory: str | None = None
    alternative: int = 0


class GpuAllocation(_Response):
    """The accelerator pinned to a box at creation, with ``kind``, ``resource_name`` and
    ``devices`` as its profile shows them; ``allocated`` lists the devices of a DRA box
    once Kubernetes has allocated them."""

    profile: str
    display_name: str
    kind: GpuKind = "extended-resource"
    resource_name: str
    devices: str | None = None
    count: int
    allocated: list[AllocatedDevice] | None = None


class ImageAllocation(_Response):
    """The image profile pinned to a box at creation."""

    profile: str
    display_name: str
    mode: ImageMode
    ports: list[ImagePort] = Field(default_factory=list)
    # The folder of the box's home (relative to it) that a sidecar serves, read-only.
    home_folder: str | None = None


class Activity(_Response):
    """What a running box's activity agent last reported.

    ``unknown`` when no agent reports (such a box is never stopped for idleness);
    ``stops_at`` is set while the box is idle and its operator stops idle boxes.
    """

    state: Literal["active", "idle", "unknown"]
    idle_since: AwareDatetime | None = None
    stops_at: AwareDatetime | None = None


StopReason = Literal["ttl", "idle"]


class StopWarning(_Response):
    """The controller stops this running box soon: at ``stops_at``, because its time to
    live ends (``ttl``; ``extend`` pushes it back) or it was idle for its window
    (``idle``; any use, or ``extend``, starts the window again). Sent from the operator's
    lead time before the stop; ``message`` says it in one sentence. For an idle stop,
    ``gpu_utilization`` is the last GPU utilization (percent) the box reported, when known.
    """

    reason: StopReason
    stops_at: AwareDatetime
    message: str
    gpu_utilization: float | None = None


class Devbox(_Response):
    """One box as the API reports it."""

    name: str
    state: DevboxState
    preset: str
    created_at: AwareDatetime
    # The box's Kubernetes uid: a box deleted and created again under its name gets
    # another. None from controllers that do not send it.
    uid: str | None = None
    # The person the box belongs to; "operator" for boxes made with the operator token.
    owner: str = "operator"
    expires_at: AwareDatetime | None = None
    repository: str | None = None
    ssh_host: str | None = None
    ssh_port: int = 22
    # The login user, set with ssh_host once the box is ready; ssh_command says the same
    # for people, these three fields say it for programs.
    ssh_user: str | None = None
    ssh_command: str | None = None
    # The box's SSH host public keys ("ssh-ed25519 AAAA..."), which its sshd must present:
    # clients check the box against them. Empty for a box made before the controller made
    # host keys, and from controllers that do not send them.
    ssh_host_keys: list[str] = Field(default_factory=list)
    pod_name: str | None = None
    pod_ready: bool = False
    restarts: int = 0
    storage_size: str | None = None
    message: str | None = None
    gpu: GpuAllocation | None = None
    image: ImageAllocation | None = None
    # One human line saying why a box that is not ready is not ready yet, e.g. "Waiting
    # for a free NVIDIA L4: 0 of 2 free, 2nd in line"; None when ready or stopped.
    summary: str | None = None
    # The scheduler's own sentence, verbatim, while it cannot place the box's pod.
    scheduling_detail: str | None = None
    # Lifecycle: a running box whose pod template lags behind the release, and why.
    restart_required: bool = False
    restart_reason: str | None = None
    activity: Activity | None = None
    # Set while the box is within the operator's warning time of a stop the controller
    # enforces; None otherwise, and from controllers that do not warn.
    stop_warning: StopWarning | None = None


class ProfileAvailability(_Response):
    """How many boxes of one GPU profile could start now, in the profile's own units.

    ``available`` and ``capacity`` are None when the controller cannot see the cluster's
    nodes and pods; ``reason`` then says why. ``reason`` also explains a capacity of 0.
    """

    name: str
    available: int | None = None
    capacity: int | None = None
    waiting: int = 0
    reason: str | None = None


class GpuAvailability(_Response):
    """Body of ``GET /api/v1/gpu/availability``."""

    observed_at: AwareDatetime
    profiles: list[ProfileAvailability] = Field(default_factory=list)

    def profile(self, name: str) -> ProfileAvailability | None:
        return next((p for p in self.profiles if p.name == name), None)


class ProfileWhen(_Response):
    """When a new box of one GPU profile would get a device, as things stand.

    ``free_at`` is now while a device is free beyond the boxes already waiting; later, the
    time to live's end of the box whose device it would get in turn; None when the
    controller cannot tell (``basis`` says why). With ``bound``, every device of the
    profile is free or held by a box of it whose stop the controller enforces, so the time
    is the latest as things stand: later only if the owner of a box ahead extends it or
    someone holding fewer of these devices joins the line first. Without, it is an
    estimate. ``basis`` says it in one sentence.
    """

    name: str
    free_at: AwareDatetime | None = None
    bound: bool = False
    basis: str


class GpuWhen(_Response):
    """Body of ``GET /api/v1/gpu/when``."""

    observed_at: AwareDatetime
    profiles: list[ProfileWhen] = Field(default_factory=list)

    def profile(self, name: str) -> ProfileWhen | None:
        return next((p for p in self.profiles if p.name == name), None)


class BookingState(StrEnum):
    """Where a booking stands, derived by the controller from its record and the clock."""

    # The window has not opened.
    BOOKED = "booked"
    # The window is open and the booking's box has not had its device yet.
    OPEN = "open"
    # A box of the booking had its device in the window.
    USED = "used"
    # Unused after the grace time, or cancelled by an admin; it keeps nothing.
    RELEASED = "released"
    # The window has closed.
    ENDED = "ended"


# A booking's name, chosen by the controller.
BOOKING_NAME_PATTERN = r"^bk-[a-z0-9]{8}$"
# The longest window one booking may ask for, whatever the settings say.
MAX_BOOKING_HOURS = 168


class BookingCreate(_Request):
    """Body of ``POST /api/v1/bookings``: one device of ``profile``, for its own units, from
    ``starts_at`` for ``hours``; ``box`` (one of the asker's boxes) is the box that gets it
    first, else any of the asker's boxes of the profile."""

    profile: Annotated[str, Field(pattern=NAME_PATTERN)]
    starts_at: AwareDatetime
    hours: Annotated[int, Field(ge=1, le=MAX_BOOKING_HOURS), JSON_NUMBER]
    box: Annotated[str, Field(json_schema_extra={"pattern": NAME_INPUT_PATTERN})] | None = None

    @field_validator("box")
    @classmethod
    def _box(cls, value: str | None) -> str | None:
        return None if value is None else normalize_name(value)


class Booking(_Response):
    """A promise of one unit of a GPU profile to ``owner`` over ``[starts_at, ends_at)``.

    ``used_by`` is the box that had the device in the window; ``message`` says in one
    sentence what the booking keeps and, released, why.
    """

    name: str
    owner: str
    profile: str
    starts_at: AwareDatetime
    ends_at: AwareDatetime
    box: str | None = None
    state: BookingState
    used_by: str | None = None
    created_at: AwareDatetime
    message: str


class BookingList(_Response):
    """Body of ``GET /api/v1/bookings``: earliest window first."""

    items: list[Booking] = Field(default_factory=list)


# What one stretch of a device's next hours is: a running box until its time to live
# ends, a booking's window, or pods that are not boxes.
SegmentKind = Literal["box", "booking", "other"]


class TimelineSegment(_Response):
    """One unit of a profile promised from ``starts_at`` to ``ends_at``. ``label`` names
    the caller's own boxes and every booking's owner; others' boxes are "a box"."""

    kind: SegmentKind
    starts_at: AwareDatetime
    ends_at: AwareDatetime
    label: str
    mine: bool = False


class ProfileTimeline(_Response):
    """One GPU profile's next hours: one lane per unit of it, and the boxes waiting.
    ``note`` says why there are no lanes (the devices are not counted)."""

    name: str
    lanes: list[list[TimelineSegment]] = Field(default_factory=list)
    waiting: int = 0
    note: str | None = None


class GpuTimeline(_Response):
    """Body of ``GET /api/v1/gpu/timeline``: the next 24 hours of each bookable profile."""

    starts_at: AwareDatetime
    ends_at: AwareDatetime
    profiles: list[ProfileTimeline] = Field(default_factory=list)


DoctorVerdict = Literal["pass", "warn", "fail"]


class DoctorCheck(_Response):
    """One finding of the GPU doctor; ``profile`` is None for cluster-wide checks."""

    profile: str | None = None
    check: str
    verdict: DoctorVerdict
    message: str
    fix: str | None = None


class DoctorReport(_Response):
    """Body of ``GET /api/v1/gpu/doctor``: ``ok`` is false when any check fails."""

    ok: bool
    checks: list[DoctorCheck] = Field(default_factory=list)


class DevboxExtend(_Request):
    """Body of ``POST /api/v1/devboxes/{name}/extend``: push the auto-stop time back."""

    hours: Annotated[int, Field(ge=1), JSON_NUMBER]


class ActivityReport(_Request):
    """What a box's activity agent sends each minute; small and bounded."""

    ssh_sessions: Annotated[int, Field(ge=0, le=10_000), JSON_NUMBER]
    busy_kernels: Annotated[int, Field(ge=0, le=10_000), JSON_NUMBER]
    # Highest utilization of the box's GPUs in percent; None when no vendor tool answers.
    gpu_utilization: Annotated[float, Field(ge=0, le=100), JSON_NUMBER] | None = None


# The most boxes one page of ``GET /api/v1/devboxes`` holds.
MAX_LIST_LIMIT = 1000
# The longest user name an identity provider may give a person.
MAX_USER_LENGTH = 256
# A line of a .pub file; the longest RSA keys take under 3,000 characters.
MAX_PUBLIC_KEY_LENGTH = 4096


class DevboxList(_Response):
    """Body of ``GET /api/v1/devboxes``: newest first. A paged answer (the request sent
    ``limit`` or ``continue``) is in name order and carries ``continue``."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    items: list[Devbox]
    # Named as on the wire, which Python reserves.
    continue_: str | None = Field(
        default=None,
        alias="continue",
        description=(
            "Present on paged answers only: the token that fetches the next page, "
            "null on the last page"
        ),
    )


class DeleteResult(_Response):
    """Body of ``DELETE /api/v1/devboxes/{name}``."""

    name: str
    purged: bool
    message: str


class Volume(_Response):
    """A retained home volume: a claim whose box was deleted or never finished creating."""

    name: str
    claim: str
    size: str | None = None
    created_at: AwareDatetime
    last_profile: str | None = None
    owner: str = "operator"


class VolumeList(_Response):
    """Body of ``GET /api/v1/volumes``: oldest first."""

    items: list[Volume]


class WhoAmI(_Response):
    """Body of ``GET /api/v1/whoami``."""

    user: str
    # How the caller proved who they are: operator, hub, oidc, browser-session, cli-bearer.
    mode: str
    groups: list[str] = Field(default_factory=list)
    # Admins see and act on every box; people see only their own.
    admin: bool = False


class SshKeyAdd(_Request):
    """Body of ``POST /api/v1/keys``: one line of a ``.pub`` file."""

    key: Annotated[str, Field(max_length=MAX_PUBLIC_KEY_LENGTH)]


class SshKey(_Response):
    """One of a person's SSH public keys; every box of theirs accepts it for logins."""

    # As ``ssh-keygen -l`` shows it, e.g. ``SHA256:FRANtL/pZZX1...``.
    fingerprint: str
    algorithm: str
    comment: str | None = None
    added_at: AwareDatetime


class SshKeyList(_Response):
    """Body of ``GET /api/v1/keys``: the caller's keys, oldest first."""

    items: list[SshKey]


class FieldError(_Response):
    """One entry of a 422 ``detail`` list: which field broke which rule.

    The shape of pydantic's validation errors, for the rules the controller checks
    itself too (the longest TTL, the GPU profiles on offer), so that a client places
    every refusal next to its field by ``loc`` alone.
    """

    type: str = "value_error"
    loc: list[str | int] = Field(default_factory=list)
    msg: str


def field_errors(errors: Iterable[Mapping[str, Any]], *prefix: str) -> list[FieldError]:
    """Pydantic's errors as field errors; ``prefix`` places them, e.g. ``"body"`` when
    the model validated was the request body. Pydantic's "Value error, " is dropped: the
    message of a custom rule says what is wrong by itself."""
    return [
        FieldError(
            type=str(error["type"]),
            loc=[*prefix, *(part if isinstance(part, int) else str(part) for part in error["loc"])],
            msg=str(error["msg"]).removeprefix("Value error, "),
        )
        for error in errors
    ]


class ErrorBody(_Response):
    """Every error response: a message, or a list of field errors for 422."""

    detail: str | list[FieldError]


class Health(_Response):
    status: str


# What a usage report adds up by.
UsageGroupBy = Literal["person", "group", "profile", "box"]
USAGE_GROUP_BYS: tuple[UsageGroupBy, ...] = ("person", "group", "profile", "box")
# The longest span one usage report covers.
MAX_USAGE_DAYS = 400


class UsageLine(_Response):
    """What one person, group, profile or box used over a report's span, in seconds.

    ``allocated_seconds`` are device-seconds (a box with two devices for an hour held
    7,200), split into ``busy_seconds`` (utilization at or above the idle threshold),
    ``idle_seconds`` (below it) and ``unknown_seconds`` (no fresh reading: no activity
    agent, a MIG instance, a sampler that stopped); the three add up to the allocated.
    ``waiting_seconds`` are wall seconds a running box waited for its device. A box's
    line counts a group's usage once per group its owner was in at the box's last create
    or start, so group lines may add up to more than the whole.
    """

    key: str
    allocated_seconds: int = 0
    busy_seconds: int = 0
    idle_seconds: int = 0
    unknown_seconds: int = 0
    waiting_seconds: int = 0
    # The people, profiles and boxes the line covers.
    people: int = 0
    boxes: int = 0
    # A box's line: its owner and GPU profile, known after the box is gone too.
    owner: str | None = None
    profile: str | None = None

    @property
    def busy_share(self) -> float | None:
        """Busy of the device-seconds whose utilization is known; None when none is."""
        known = self.busy_seconds + self.idle_seconds
        return None if known == 0 else self.busy_seconds / known


class UsageDay(_Response):
    """One UTC day of a profile's usage, for charts over time."""

    day: str
    profile: str
    allocated_seconds: int = 0
    busy_seconds: int = 0
    idle_seconds: int = 0
    unknown_seconds: int = 0
    waiting_seconds: int = 0


class UsageReport(_Response):
    """Body of ``GET /api/v1/usage``: usage over ``[since, until)``, by ``group_by``.

    ``lines`` are ordered by allocated seconds, most first; ``days`` give each profile's
    usage per UTC day of the span. ``recorded_until`` is when the recording last reached
    (usage after it is not in the report yet) and ``bound_seconds`` the most a change
    of state may be counted late by. ``scope`` is the person the report is limited to,
    or None for everyone's.
    """

    since: AwareDatetime
    until: AwareDatetime
    group_by: UsageGroupBy
    scope: str | None = None
    lines: list[UsageLine] = Field(default_factory=list)
    days: list[UsageDay] = Field(default_factory=list)
    total: UsageLine
    recorded_until: AwareDatetime | None = None
    bound_seconds: int
