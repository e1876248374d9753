"""One create, start and wait per box in this Jupyter server, however many kernels ask.

Two notebooks opened together, or a session start beside a kernel start, ask for the
same box at the same moment. The first start asks the controller; the others join it,
see its progress and share its answer instead of racing it to create the box. A start
can be cancelled while it waits: when the last kernel waiting on a box leaves, a box
that this start created or started is stopped again, which also ends the wait.

With several clusters configured, a kernel pins the cluster its box is on when it
starts (:func:`kernel_cluster`), and every call for that kernel goes to that cluster
(:func:`controller`): a box is never looked for on another cluster. Boxes of one name on
two clusters are two boxes, with a start each.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from devboxes_sdk import models
from devboxes_sdk.client import Client, Devbox
from devboxes_sdk.config import chosen_cluster
from devboxes_sdk.errors import Conflict, DevboxesError, NotFound
from devboxes_sdk.labels import reason, status_line

# How often a waiting kernel looks whether its start was cancelled.
_CANCEL_CHECK_SECONDS = 0.2
CANCELLED = "the kernel start was cancelled"


def kernel_cluster(env: Mapping[str, str] | None = None) -> str | None:
    """The configured cluster a kernel starting now uses, for the whole of its life (see
    :func:`devboxes_sdk.config.chosen_cluster`); None when every call resolves the
    controller as ``Client()`` does."""
    return chosen_cluster(env=env)


def controller(cluster: str | None) -> Client:
    """A client of ``cluster`` (a configured cluster's name), or ``Client()`` for None."""
    return Client(cluster=cluster)


def on_cluster(name: str, cluster: str | None) -> str:
    """``box nb-ada-cpu`` as the kernel's messages name it: with its cluster when pinned."""
    return name if cluster is None else f"{name} on cluster {cluster}"


class WrongBox(DevboxesError):
    """The name is taken by a box this start must not use (another accelerator, or not
    the caller's own)."""


class StartCancelled(DevboxesError):
    """The kernel start left the wait because it was cancelled."""


@dataclass(frozen=True)
class BoxRequest:
    """What a kernel start asks for: the box by name (on ``cluster``, when the kernel
    pinned one), and how to create it if missing."""

    name: str
    profile: str | None
    preset: models.Preset
    ttl_hours: int
    timeout: float
    cluster: str | None = None

    @property
    def key(self) -> tuple[str | None, str]:
        return self.cluster, self.name


@dataclass
class Readiness:
    """A shared start's answer to one kernel."""

    box: Devbox
    created: bool
    # This kernel's start created the box or started it from stopped, so a failure of
    # this kernel before it connects gives the box back.
    took: bool


Report = Callable[[str, str], None]


@dataclass
class _Start:
    request: BoxRequest
    done: threading.Event = field(default_factory=threading.Event)
    box: Devbox | None = None
    error: Exception | None = None
    # What a failure adds to its message: that the box taken for it is stopped again.
    note: str = ""
    created: bool = False
    took: bool = False
    given_back: bool = False
    # The kernel that answers for a box the start took, once the box is ready: the
    # first of those still waiting.
    owner: str = ""
    waiting: dict[str, Report] = field(default_factory=dict)


class StartFailed(DevboxesError):
    """The shared start failed: ``cause`` is why, ``note`` what became of the box."""

    def __init__(self, cause: Exception, note: str) -> None:
        super().__init__(f"{cause}{note}")
        self.cause = cause
        self.note = note


def create_or_adopt(client: Client, request: BoxRequest) -> tuple[Devbox, bool]:
    """The box of ``request``, created when missing; True when it was created here.

    A create that loses to another server (409) adopts the box it lost to, when that
    box is the caller's own; the accelerator is checked by the caller either way.
    """
    try:
        return client.get(request.name), False
    except NotFound:
        pass
    try:
        box = client.create(
            request.name,
            preset=request.preset,
            ttl_hours=request.ttl_hours,
            gpu=request.profile,
        )
    except Conflict:
        try:
            box = client.get(request.name)
        except NotFound:
            raise WrongBox(f"the name {request.name} is taken by a box that is not yours") from None
        # An admin sees everyone's boxes: one of another person's is not to be used.
        owner = client.whoami().user
        if box.owner != owner:
            raise WrongBox(
                f"the name {request.name} is taken by a box of {box.owner}, not yours"
            ) from None
        return box, False
    return box, True


class BoxStarts:
    """The box starts in progress in this server, by cluster and box name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._starts: dict[tuple[str | None, str], _Start] = {}
        self._cancelled: dict[str, threading.Event] = {}

    def ready(
        self,
        kernel_id: str,
        request: BoxRequest,
        check: Callable[[Client, Devbox], str | None],
        report: Report,
    ) -> Readiness:
        """Wait until the box of ``request`` is ready, joining a start already under way.

        ``check`` says why this kernel cannot use a box (None: it can); ``report`` gets
        each step as ``(phase, message)``. Raises :class:`StartCancelled` after
        :meth:`cancel` and :class:`StartFailed` when the shared start fails.
        """
        cancelled = threading.Event()
        with self._lock:
            self._cancelled[kernel_id] = cancelled
            start = self._starts.get(request.key)
            joined = start is not None
            if start is None:
                start = _Start(request=request)
                self._starts[request.key] = start
                threading.Thread(target=self._run, args=(start, check), daemon=True).start()
            start.waiting[kernel_id] = report
        if joined:
            named = on_cluster(request.name, request.cluster)
            report("waiting", f"waiting for box {named}, which another kernel is starting")
        try:
            while not start.done.wait(_CANCEL_CHECK_SECONDS):
                if cancelled.is_set():
                    raise StartCancelled(CANCELLED + self._leave(start, kernel_id))
        finally:
            with self._lock:
                self._cancelled.pop(kernel_id, None)
                start.waiting.pop(kernel_id, None)
        if start.error is not None:
            raise StartFailed(start.error, start.note)
        assert start.box is not None
        return Readiness(start.box, start.created, start.took and kernel_id == start.owner)

    def cancel(self, kernel_id: str) -> bool:
        """End the wait of ``kernel_id``; False when it is not waiting for a box."""
        with self._lock:
            cancelled = self._cancelled.get(kernel_id)
        if cancelled is None:
            return False
        cancelled.set()
        return True

    def _leave(self, start: _Start, kernel_id: str) -> str:
        """Take ``kernel_id`` off the start; the last one gives back a box the start took.
        What to add to the cancellation's message."""
        with self._lock:
            start.waiting.pop(kernel_id, None)
            if start.waiting or start.done.is_set():
                return ""
            if self._starts.get(start.request.key) is start:
                del self._starts[start.request.key]
            give_back = start.took and not start.given_back
            start.given_back = start.given_back or give_back
        if not give_back:
            return f"; box {start.request.name} is left as it was"
        # Stopping the box also ends the controller wait the start is in.
        return give_back_box(start.request.name, start.request.cluster)

    def _unless_abandoned(self, start: _Start) -> None:
        with self._lock:
            if not start.waiting:
                raise StartCancelled(CANCELLED)

    def _report(self, start: _Start, phase: str, message: str) -> None:
        with self._lock:
            reports = list(start.waiting.values())
        for report in reports:
            report(phase, message)

    def _run(self, start: _Start, check: Callable[[Client, Devbox], str | None]) -> None:
        request = start.request
        name = request.name
        named = on_cluster(name, request.cluster)
        try:
            client = controller(request.cluster)
            box, start.created = create_or_adopt(client, request)
            if start.created:
                self._report(start, "creating", f"created box {named}")
            start.took = start.created
            refusal = check(client, box)
            if refusal is not None:
                raise WrongBox(refusal)
            if box.state is models.DevboxState.STOPPED:
                self._report(start, "starting", f"starting stopped box {named}")
                box = client.start(name)
                start.took = True
            self._unless_abandoned(start)

            def update(current: Devbox) -> None:
                self._unless_abandoned(start)
                line = status_line(current.state, reason(current.summary, current.message))
                self._report(start, "waiting", f"box {named}: {line}")

            start.box = client.wait_ready(name, request.timeout, on_update=update)
        except Exception as error:  # noqa: BLE001 - every waiter gets it as its own failure
            start.error = error
        with self._lock:
            if self._starts.get(request.key) is start:
                del self._starts[request.key]
            start.owner = next(iter(start.waiting), "")
            # A failed start, or one everyone left: nobody will use what it took.
            give_back = (
                start.took and not start.given_back and (start.error is not None or not start.owner)
            )
            if give_back:
                start.given_back = True
        if give_back:
            start.note = give_back_box(name, request.cluster)
        start.done.set()


def give_back_box(name: str, cluster: str | None = None) -> str:
    """Stop a box a kernel start took (on ``cluster``, when the kernel pinned one); what
    to add to the start's message."""
    try:
        controller(cluster).stop(name)
    except DevboxesError as error:
        return f"; box {name} could not be stopped again: {error}"
    return f"; box {name}, started for this kernel, is stopped again (home kept)"


STARTS = BoxStarts()
