"""ipywidgets views over a :class:`devboxes_sdk.client.Client`, or over every cluster of
a :class:`devboxes_sdk.clusters.Clusters`.

The widgets hold no state of their own beyond what they show: every action is one SDK
call, every error is shown next to the control that caused it, and waiting for a box
runs on a background thread so the kernel stays free. Over several clusters, a cluster
that does not answer is one line in the widget, and the others are shown as they are.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

import ipywidgets as widgets
from traitlets import TraitError, Unicode, observe, validate

from devboxes_jupyter import labels
from devboxes_sdk import models
from devboxes_sdk.client import Client, Devbox
from devboxes_sdk.clusters import Answers, Clusters
from devboxes_sdk.errors import (
    BoxNotReady,
    DevboxesError,
    NotFound,
    StartTimeout,
    ValidationError,
)
from devboxes_sdk.labels import (
    accelerator_label,
    allocated_label,
    auto_stop_label,
    environment_label,
    reason,
    stale_notice,
    status_line,
)

__all__ = ["AcceleratorPicker", "DevboxLauncher", "DevboxTable"]

# ipywidgets ships no type information, so its classes are Any to mypy; strict settings
# refuse subclassing Any, hence the ignores on the subclasses below.
_ERROR_STYLE = "color: var(--jp-error-color1, #d32f2f)"
_NOTE_STYLE = "color: var(--jp-ui-font-color2, #616161)"


def _error_html(text: str) -> str:
    return f'<span style="{_ERROR_STYLE}">{escape(text)}</span>' if text else ""


def _note_html(text: str) -> str:
    return f'<span style="{_NOTE_STYLE}">{escape(text)}</span>' if text else ""


def _lines(errors: Sequence[str], notes: Sequence[str]) -> str:
    """One line per cluster that gave no answer, then the notes of the answers."""
    return "<br>".join([*map(_error_html, errors), *map(_note_html, notes)])


def _catalog(
    client: Client, preset: models.Preset | None
) -> tuple[models.Capabilities, models.GpuAvailability | None]:
    """One cluster's capabilities, and its free counts (for ``preset``) when it counts."""
    capabilities = client.capabilities()
    availability = None
    if capabilities.gpu.enabled:
        with contextlib.suppress(NotFound):
            availability = client.gpu.availability(preset)
    return capabilities, availability


def _offers(
    asked: Answers[tuple[models.Capabilities, models.GpuAvailability | None]],
) -> list[labels.ClusterOffer]:
    return [
        labels.ClusterOffer(answer.cluster, capabilities.gpu, availability, capabilities.images)
        for answer in asked.answers
        for capabilities, availability in [answer.value]
    ]


class AcceleratorPicker(widgets.VBox):  # type: ignore[misc, unused-ignore]
    """Choose CPU only or one GPU profile; ``value`` is None (CPU) or the profile name.

    Given a :class:`Clusters` instead of a catalog, a *Cluster* choice comes first:
    ``cluster`` is ``"auto"`` ("All clusters": each profile shows every cluster's own
    free count, and a create goes where a device is free) or a cluster's name (that
    cluster's catalog, as with one client). ``cluster`` is None with one catalog.
    """

    value = Unicode(None, allow_none=True, help="None for CPU only, else a profile name")
    cluster = Unicode(
        None,
        allow_none=True,
        help="With several clusters: 'auto' for all of them, else a cluster's name",
    )

    def __init__(
        self,
        gpu: models.GpuCapabilities | Clusters,
        *,
        note: str | None = None,
        preset: models.Preset | None = None,
        **kwargs: Any,
    ) -> None:
        self.clusters = gpu if isinstance(gpu, Clusters) else None
        # What each cluster that answered offers, and why the others gave no answer.
        self.offers: list[labels.ClusterOffer] = []
        self.cluster_errors: dict[str, str] = {}
        self.cluster_notes: list[str] = []
        if isinstance(gpu, Clusters):
            gpu = models.GpuCapabilities(enabled=False)
        self.gpu = gpu
        self._note = note
        self.dropdown = widgets.Dropdown(
            options=labels.accelerator_options(gpu),
            value=labels.CPU_KEY,
            description="Accelerator",
            disabled=not gpu.enabled,
            style={"description_width": "initial"},
        )
        self.dropdown.add_class("devboxes-accelerator")
        self.help = widgets.HTML()
        self.help.add_class("devboxes-accelerator-help")
        children = [self.dropdown, self.help]
        self.cluster_dropdown: widgets.Dropdown | None = None
        self.problems: widgets.HTML | None = None
        if self.clusters is not None:
            self.cluster_dropdown = widgets.Dropdown(
                options=labels.cluster_options(self.clusters.names),
                value=labels.default_cluster_key(self.clusters.names),
                description="Cluster",
                style={"description_width": "initial"},
            )
            self.cluster_dropdown.add_class("devboxes-cluster")
            self.problems = widgets.HTML()
            self.problems.add_class("devboxes-cluster-problems")
            children = [self.cluster_dropdown, self.dropdown, self.help, self.problems]
        super().__init__(children=children, **kwargs)
        self.dropdown.observe(self._from_dropdown, names="value")
        if self.cluster_dropdown is None:
            self._describe()
            return
        self._load(preset)
        self.cluster_dropdown.observe(self._from_cluster_dropdown, names="value")
        # Shows the default choice's catalog (see _to_cluster_dropdown).
        self.cluster = self.cluster_dropdown.value

    @classmethod
    def from_client(cls, client: Client, **kwargs: Any) -> AcceleratorPicker:
        return cls(client.capabilities().gpu, **kwargs)

    @classmethod
    def from_clusters(cls, clusters: Clusters, **kwargs: Any) -> AcceleratorPicker:
        return cls(clusters, **kwargs)

    def refresh(self, preset: models.Preset | None = None) -> None:
        """Ask every cluster again for its catalog and free counts (for ``preset``); the
        choices stay chosen where they still exist. Nothing to ask with one catalog."""
        if self.clusters is None:
            return
        self._load(preset)
        self._apply()

    def _load(self, preset: models.Preset | None) -> None:
        assert self.clusters is not None
        assert self.problems is not None
        asked = self.clusters.ask(lambda client: _catalog(client, preset))
        self.offers = _offers(asked)
        self.cluster_errors = {error.cluster: error.message for error in asked.errors}
        self.cluster_notes = list(asked.notes)
        self.problems.value = _lines(
            [labels.cluster_problem(e.cluster, e.message) for e in asked.errors], asked.notes
        )

    def offer(self, cluster: str) -> labels.ClusterOffer | None:
        """What ``cluster`` offered when last asked; None when it gave no answer."""
        return next((offer for offer in self.offers if offer.cluster == cluster), None)

    @property
    def all_clusters(self) -> bool:
        """Whether the choice spans every cluster ("All clusters")."""
        return self.clusters is not None and self.cluster == labels.ALL_CLUSTERS_KEY

    def _apply(self) -> None:
        """Offer the chosen cluster's profiles (or every cluster's), keeping the chosen
        profile when it is still offered."""
        if self.all_clusters:
            self.gpu = labels.merged_gpu(self.offers)
            options = labels.merged_accelerator_options(self.offers)
        else:
            offer = self.offer(self.cluster or "")
            self.gpu = offer.gpu if offer is not None else models.GpuCapabilities(enabled=False)
            options = labels.accelerator_options(self.gpu)
        chosen = self.value or labels.CPU_KEY
        kept = chosen if chosen in [key for _label, key in options] else labels.CPU_KEY
        self.dropdown.options = options
        self.dropdown.disabled = not self.gpu.enabled
        self.dropdown.value = kept
        self.value = kept or None
        self._describe()

    @validate("value")
    def _check_value(self, proposal: dict[str, Any]) -> str | None:
        value: str | None = proposal["value"]
        if value is None or value == labels.CPU_KEY:
            return None
        names = [profile.name for profile in self.gpu.profiles] if self.gpu.enabled else []
        if value not in names:
            available = ", ".join(names) or "none, GPU acceleration is disabled"
            raise TraitError(f"no GPU profile named {value!r} (available: {available})")
        return value

    @validate("cluster")
    def _check_cluster(self, proposal: dict[str, Any]) -> str | None:
        value: str | None = proposal["value"]
        if self.clusters is None:
            if value is not None:
                raise TraitError("this picker shows one catalog: there is no cluster to choose")
            return None
        keys = [key for _label, key in labels.cluster_options(self.clusters.names)]
        if value not in keys:
            raise TraitError(f"no cluster named {value!r} (choose one of: {', '.join(keys)})")
        return value

    @observe("value")
    def _to_dropdown(self, change: dict[str, Any]) -> None:
        self.dropdown.value = change["new"] or labels.CPU_KEY

    @observe("cluster")
    def _to_cluster_dropdown(self, change: dict[str, Any]) -> None:
        if self.cluster_dropdown is None:
            return
        self.cluster_dropdown.value = change["new"]
        self._apply()

    def _from_dropdown(self, change: dict[str, Any]) -> None:
        self.value = change["new"] or None
        self._describe()

    def _from_cluster_dropdown(self, change: dict[str, Any]) -> None:
        self.cluster = change["new"]

    def _unanswered(self) -> str | None:
        """Why the chosen cluster (or, for all, every cluster) shows no catalog."""
        if self.clusters is None:
            return self._note
        if self.all_clusters:
            return None if self.offers else "No cluster answered: new boxes cannot be created."
        cluster = self.cluster or ""
        if self.offer(cluster) is not None:
            return None
        why = self.cluster_errors.get(cluster)
        if why is None:
            why = next((n for n in self.cluster_notes if n.startswith(f"{cluster} ")), "no answer")
        return f"The accelerator catalog of {cluster} could not be loaded: {why}"

    def _describe(self) -> None:
        key = self.dropdown.value or labels.CPU_KEY
        if self.all_clusters:
            text = labels.merged_accelerator_help(self.offers, key)
        else:
            text = labels.accelerator_help(self.gpu, key)
        note = self._unanswered()
        if note and not self.gpu.enabled:
            text = note
        self.help.value = _note_html(text)
        self.dropdown.tooltip = text


class DevboxLauncher(widgets.VBox):  # type: ignore[misc, unused-ignore]
    """A create form that then follows the new box until it is ready or degraded.

    Given a :class:`Clusters`, the form's picker has the *Cluster* choice: with "All
    clusters" the create goes where the chosen profile has a device free
    (``cluster="auto"``), and ``placement`` says where it went and why."""

    def __init__(
        self, client: Client | Clusters, *, wait_timeout: float = 900.0, **kwargs: Any
    ) -> None:
        self.clusters = client if isinstance(client, Clusters) else None
        self.client: Client | None = None if isinstance(client, Clusters) else client
        self.wait_timeout = wait_timeout
        self.box: Devbox | None = None
        # The cluster of the box, with several clusters.
        self.cluster: str | None = None
        self.watcher: threading.Thread | None = None
        self._generation = 0
        self._lock = threading.Lock()

        self.name = widgets.Text(description="Name", placeholder="my-box")
        self.preset = widgets.Dropdown(
            options=list(models.PRESETS), value="small", description="Preset"
        )
        self.ttl_hours = widgets.IntText(value=24, description="Auto-stop (h)")
        self.error = widgets.HTML()
        self.error.add_class("devboxes-error")
        if self.clusters is not None:
            self.picker = AcceleratorPicker(self.clusters, preset=self.preset.value)
            environments = self._environment_options()
        else:
            assert self.client is not None
            try:
                capabilities = self.client.capabilities()
            except DevboxesError as error:
                self.picker = AcceleratorPicker(
                    models.GpuCapabilities(enabled=False),
                    note=f"The accelerator catalog could not be loaded: {error!s}",
                )
                images = models.ImageCapabilities(enabled=False)
            else:
                self.picker = AcceleratorPicker(capabilities.gpu)
                images = capabilities.images
            environments = labels.environment_options(images)
        # Shown only when the operator publishes image profiles: otherwise every box
        # gets the workspace image and there is nothing to choose.
        self.environment = widgets.Dropdown(
            options=environments,
            value=labels.DEFAULT_ENVIRONMENT_KEY,
            description="Environment",
            style={"description_width": "initial"},
            layout=widgets.Layout(display=None if len(environments) > 1 else "none"),
        )
        self.environment.add_class("devboxes-environment")
        # Which accelerators an image supports is not published, so a mismatch shows as
        # the controller's refusal, under this choice.
        self.environment_error = widgets.HTML()
        self.environment_error.add_class("devboxes-environment-error")
        self.environment.observe(lambda _change: self._clear_environment_error(), names="value")
        self.create_button = widgets.Button(description="Create", button_style="primary")
        self.create_button.add_class("devboxes-create")
        self.status = widgets.HTML()
        self.status.add_class("devboxes-status")
        self.ssh = widgets.HTML()
        self.ssh.add_class("devboxes-ssh")
        # Where a box went and why, with several clusters.
        self.placement = widgets.HTML()
        self.placement.add_class("devboxes-placement")
        self.create_button.on_click(lambda _button: self.create())
        children = [
            self.name,
            self.preset,
            self.ttl_hours,
            self.picker,
            self.environment,
            self.environment_error,
            self.create_button,
            self.error,
            self.status,
            self.ssh,
        ]
        if self.clusters is not None:
            children.insert(children.index(self.status), self.placement)
            self.picker.observe(lambda _change: self._offer_environments(), names="cluster")
            # Free counts are for the preset: a box counts where its CPU and memory fit.
            self.preset.observe(lambda change: self.picker.refresh(change["new"]), names="value")
        super().__init__(children=children, **kwargs)
        self.add_class("devboxes-launcher")

    def _environment_options(self) -> list[tuple[str, str]]:
        """The image profiles of the chosen cluster, or of every cluster."""
        if self.picker.all_clusters:
            return labels.merged_environment_options(self.picker.offers)
        offer = self.picker.offer(self.picker.cluster or "")
        images = offer.images if offer is not None else models.ImageCapabilities(enabled=False)
        return labels.environment_options(images)

    def _offer_environments(self) -> None:
        """Another cluster chosen: its environments, keeping the chosen one if it has it."""
        options = self._environment_options()
        chosen = self.environment.value
        self.environment.options = options
        keys = [key for _label, key in options]
        self.environment.value = chosen if chosen in keys else labels.DEFAULT_ENVIRONMENT_KEY
        self.environment.layout.display = None if len(options) > 1 else "none"

    def create(self) -> Devbox | None:
        """Create the box the form describes; errors go to the form, not to a traceback."""
        self.error.value = ""
        self._clear_environment_error()
        try:
            name = models.normalize_name(self.name.value)
        except ValueError as error:
            self.error.value = _error_html(str(error))
            return None
        if self.ttl_hours.value < 1:
            self.error.value = _error_html("Auto-stop must be at least 1 hour.")
            return None
        self.create_button.disabled = True
        placement = ""
        try:
            if self.clusters is not None:
                made = self.clusters.create(
                    name,
                    cluster=self.picker.cluster,
                    preset=self.preset.value,
                    ttl_hours=self.ttl_hours.value,
                    gpu=self.picker.value,
                    image=self.environment.value or None,
                )
                box, cluster, client = made.box, made.cluster, self.clusters.client(made.cluster)
                placement = labels.placement_line(box.name, made.reason)
            else:
                assert self.client is not None
                box = self.client.create(
                    name,
                    preset=self.preset.value,
                    ttl_hours=self.ttl_hours.value,
                    gpu=self.picker.value,
                    image=self.environment.value or None,
                )
                cluster, client = None, self.client
        except ValidationError as error:
            refusals = [e.msg for e in error.errors if e.loc and e.loc[-1] == "image"]
            if refusals:
                self.environment_error.value = _error_html(" ".join(refusals))
            else:
                self.error.value = _error_html(str(error))
            return None
        except DevboxesError as error:
            self.error.value = _error_html(str(error))
            return None
        finally:
            self.create_button.disabled = False
        with self._lock:
            self._generation += 1
            generation = self._generation
        self.box = box
        self.cluster = cluster
        self.ssh.value = ""
        self.placement.value = _note_html(placement)
        self._show(box, generation)
        self.watcher = threading.Thread(
            target=self._watch,
            args=(client, box.name, generation),
            name=f"devbox-wait-{box.name}",
            daemon=True,
        )
        self.watcher.start()
        return box

    def _clear_environment_error(self) -> None:
        self.environment_error.value = ""

    def wait(self, timeout: float | None = None) -> Devbox | None:
        """Block until the current box's watch ends (for scripts; the form never needs it)."""
        if self.watcher is not None:
            self.watcher.join(timeout)
        return self.box

    def _current(self, generation: int) -> bool:
        with self._lock:
            return generation == self._generation

    def _show(self, box: Devbox, generation: int, note: str = "") -> None:
        if not self._current(generation):
            return
        self.box = box
        line = status_line(box.state, reason(box.summary, box.message))
        named = labels.box_on(box.name, self.cluster)
        self.status.value = f"<b>{escape(named)}</b>: {escape(line)}" + (
            f" {_note_html(note)}" if note else ""
        )
        if box.state is models.DevboxState.READY and box.ssh_command:
            self.ssh.value = f"<code>{escape(box.ssh_command)}</code>"

    def _watch(self, client: Client, name: str, generation: int) -> None:
        on_update: Callable[[Devbox], None] = lambda box: self._show(box, generation)  # noqa: E731
        try:
            box = client.wait_ready(name, self.wait_timeout, on_update=on_update)
        except StartTimeout as error:
            self._show(error.box, generation, f"(not ready after {error.timeout:g} s)")
        except BoxNotReady as error:
            self._show(error.box, generation)
        except DevboxesError as error:
            if self._current(generation):
                self.error.value = _error_html(str(error))
        else:
            self._show(box, generation)


def _action_button(label: str, icon: str, tooltip: str, disabled: bool) -> widgets.Button:
    # ipywidgets buttons have a fixed width and cut their label with an ellipsis;
    # sized to their content and never shrunk, the whole label shows.
    return widgets.Button(
        description=label,
        icon=icon,
        tooltip=tooltip,
        disabled=disabled,
        layout=widgets.Layout(width="auto", min_width="max-content", flex="0 0 auto"),
    )


def _accelerator_html(box: Devbox) -> str:
    """The box's accelerator, and under it what a DRA box actually got, which its profile
    may leave open (one of alternatives)."""
    text = escape(accelerator_label(box.gpu))
    if box.gpu is None or not box.gpu.allocated:
        return text
    return f"{text}<br>{_note_html(f'allocated {allocated_label(box.gpu.allocated)}')}"


class _Row:
    """The widgets of one box in :class:`DevboxTable`; ``cluster`` is the box's cluster,
    with several clusters."""

    def __init__(
        self, table: DevboxTable, box: Devbox, now: datetime, cluster: str | None = None
    ) -> None:
        self.name = box.name
        self.cluster = cluster
        named = labels.box_on(box.name, cluster)
        self.state = widgets.HTML(escape(status_line(box.state, reason(box.summary, box.message))))
        self.accelerator = widgets.HTML(_accelerator_html(box))
        self.environment = widgets.HTML(escape(environment_label(box.image)))
        stop = auto_stop_label(box.state, box.expires_at, now, box.stop_warning)
        self.auto_stop = widgets.HTML(escape(stop))
        stopped = box.state is models.DevboxState.STOPPED
        self.start_button = _action_button("Start", "play", f"Start {named}", not stopped)
        self.stop_button = _action_button("Stop", "stop", f"Stop {named}", stopped)
        self.delete_button = _action_button(
            "Delete", "trash", f"Delete {named} (its home volume is kept)", False
        )
        self.start_button.on_click(lambda _b: table.run(self.name, "start", self.cluster))
        self.stop_button.on_click(lambda _b: table.run(self.name, "stop", self.cluster))
        self.delete_button.on_click(lambda _b: self._delete(table))
        self.confirming = False

    def _delete(self, table: DevboxTable) -> None:
        # Deleting drops the box's compute at once, so it takes a second, deliberate click.
        if not self.confirming:
            self.confirming = True
            self.delete_button.description = "Confirm delete"
            self.delete_button.button_style = "danger"
            return
        table.run(self.name, "delete", self.cluster)

    def switch_off(self) -> None:
        """The controller is unreachable: every action would fail."""
        for button in (self.start_button, self.stop_button, self.delete_button):
            button.disabled = True

    def cells(self) -> list[widgets.Widget]:
        where = [] if self.cluster is None else [widgets.HTML(escape(self.cluster))]
        return [
            *where,
            widgets.HTML(f"<b>{escape(self.name)}</b>"),
            self.state,
            self.accelerator,
            self.environment,
            self.auto_stop,
            widgets.HBox(
                [self.start_button, self.stop_button, self.delete_button],
                layout=widgets.Layout(flex_flow="row nowrap", overflow="visible"),
            ),
        ]


class DevboxTable(widgets.VBox):  # type: ignore[misc, unused-ignore]
    """The user's boxes with state, accelerator, environment, auto-stop time and
    start/stop/delete.

    Given a :class:`Clusters`, every cluster's boxes, with a *Cluster* column first;
    ``rows`` are then keyed ``NAME@CLUSTER`` and each action goes to the row's cluster.
    A cluster that does not answer is one line on top, and its boxes are absent until
    it answers again."""

    HEADERS: tuple[str, ...] = ("Name", "State", "Accelerator", "Environment", "Auto-stop", "")

    def __init__(self, client: Client | Clusters, **kwargs: Any) -> None:
        self.clusters = client if isinstance(client, Clusters) else None
        self.client: Client | None = None if isinstance(client, Clusters) else client
        columns = "auto minmax(14em, 3fr) auto auto auto max-content"
        if self.clusters is not None:
            self.HEADERS = ("Cluster", *DevboxTable.HEADERS)
            columns = f"auto {columns}"
        self.rows: dict[str, _Row] = {}
        # When the boxes were last read; a failed refresh keeps them, marked as stale.
        self.observed_at: datetime | None = None
        self.stale = False
        self.error = widgets.HTML()
        self.error.add_class("devboxes-error")
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh")
        self.refresh_button.on_click(lambda _b: self.refresh())
        self.grid = widgets.GridBox(
            layout=widgets.Layout(
                # The buttons' column takes what they need, so labels are never cut.
                grid_template_columns=columns,
                grid_gap="4px 16px",
            )
        )
        super().__init__(children=[self.refresh_button, self.error, self.grid], **kwargs)
        self.add_class("devboxes-table")
        self.refresh()

    def _read(self) -> tuple[dict[str, _Row], str]:
        """The rows of every box, and the lines of the clusters that did not answer;
        raises when nothing answered."""
        now = datetime.now(UTC)
        if self.clusters is None:
            assert self.client is not None
            return {box.name: _Row(self, box, now) for box in self.client.list()}, ""
        asked = self.clusters.list()
        problems = [labels.cluster_problem(e.cluster, e.message) for e in asked.errors]
        if not asked.answers and problems:
            raise DevboxesError("; ".join(problems))
        rows = {
            labels.box_on(box.name, answer.cluster): _Row(self, box, now, answer.cluster)
            for answer in asked.answers
            for box in answer.value
        }
        return rows, _lines(problems, asked.notes)

    def refresh(self) -> None:
        """Re-read the boxes from the controller (from every cluster)."""
        try:
            rows, problems = self._read()
        except DevboxesError as error:
            self.stale = True
            for row in self.rows.values():
                row.switch_off()
            notice = stale_notice(self.observed_at, datetime.now(UTC))
            self.error.value = f"{_error_html(notice)}<br>{_error_html(str(error))}"
            return
        self.stale = False
        self.observed_at = datetime.now(UTC)
        self.rows = rows
        cells: list[widgets.Widget] = [widgets.HTML(f"<b>{h}</b>") for h in self.HEADERS]
        for row in self.rows.values():
            cells.extend(row.cells())
        if not rows:
            cells.append(widgets.HTML(_note_html("No devboxes yet.")))
        self.grid.children = cells
        self.error.value = problems

    def run(self, name: str, action: str, cluster: str | None = None) -> None:
        """Start, stop or delete one box (keeping its storage), on ``cluster`` with
        several clusters, then refresh."""
        try:
            if self.clusters is None:
                assert self.client is not None
                target = self.client
            else:
                # A bare name is looked for on every cluster: found on one, it goes there.
                cluster = cluster or self.clusters.locate(name).cluster
                target = self.clusters.client(cluster)
            if action == "start":
                target.start(name)
            elif action == "stop":
                target.stop(name)
            elif action == "delete":
                target.delete(name)
            else:
                raise ValueError(f"unknown action {action!r}: use start, stop or delete")
        except DevboxesError as error:
            self.refresh()
            failed = _error_html(f"{action} {labels.box_on(name, cluster)}: {error!s}")
            # A stale list's notice (or a silent cluster's line) stays on top; the failed
            # action follows it.
            self.error.value = f"{self.error.value}<br>{failed}" if self.error.value else failed
            return
        self.refresh()
