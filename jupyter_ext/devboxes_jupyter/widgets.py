"""ipywidgets views over a :class:`devboxes_sdk.client.Client`.

The widgets hold no state of their own beyond what they show: every action is one SDK
call, every error is shown next to the control that caused it, and waiting for a box
runs on a background thread so the kernel stays free.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from html import escape
from typing import Any

import ipywidgets as widgets
from traitlets import TraitError, Unicode, observe, validate

from devboxes_jupyter import labels
from devboxes_sdk import models
from devboxes_sdk.client import Client, Devbox
from devboxes_sdk.errors import BoxNotReady, DevboxesError, StartTimeout, ValidationError
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


class AcceleratorPicker(widgets.VBox):  # type: ignore[misc, unused-ignore]
    """Choose CPU only or one GPU profile; ``value`` is None (CPU) or the profile name."""

    value = Unicode(None, allow_none=True, help="None for CPU only, else a profile name")

    def __init__(
        self, gpu: models.GpuCapabilities, *, note: str | None = None, **kwargs: Any
    ) -> None:
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
        super().__init__(children=[self.dropdown, self.help], **kwargs)
        self.dropdown.observe(self._from_dropdown, names="value")
        self._describe()

    @classmethod
    def from_client(cls, client: Client, **kwargs: Any) -> AcceleratorPicker:
        return cls(client.capabilities().gpu, **kwargs)

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

    @observe("value")
    def _to_dropdown(self, change: dict[str, Any]) -> None:
        self.dropdown.value = change["new"] or labels.CPU_KEY

    def _from_dropdown(self, change: dict[str, Any]) -> None:
        self.value = change["new"] or None
        self._describe()

    def _describe(self) -> None:
        key = self.dropdown.value or labels.CPU_KEY
        text = labels.accelerator_help(self.gpu, key)
        if self._note and not self.gpu.enabled:
            text = self._note
        self.help.value = _note_html(text)
        self.dropdown.tooltip = text


class DevboxLauncher(widgets.VBox):  # type: ignore[misc, unused-ignore]
    """A create form that then follows the new box until it is ready or degraded."""

    def __init__(self, client: Client, *, wait_timeout: float = 900.0, **kwargs: Any) -> None:
        self.client = client
        self.wait_timeout = wait_timeout
        self.box: Devbox | None = None
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
        try:
            capabilities = client.capabilities()
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
        self.create_button.on_click(lambda _button: self.create())
        super().__init__(
            children=[
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
            ],
            **kwargs,
        )
        self.add_class("devboxes-launcher")

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
        try:
            box = self.client.create(
                name,
                preset=self.preset.value,
                ttl_hours=self.ttl_hours.value,
                gpu=self.picker.value,
                image=self.environment.value or None,
            )
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
        self.ssh.value = ""
        self._show(box, generation)
        self.watcher = threading.Thread(
            target=self._watch,
            args=(box.name, generation),
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
        self.status.value = f"<b>{escape(box.name)}</b>: {escape(line)}" + (
            f" {_note_html(note)}" if note else ""
        )
        if box.state is models.DevboxState.READY and box.ssh_command:
            self.ssh.value = f"<code>{escape(box.ssh_command)}</code>"

    def _watch(self, name: str, generation: int) -> None:
        on_update: Callable[[Devbox], None] = lambda box: self._show(box, generation)  # noqa: E731
        try:
            box = self.client.wait_ready(name, self.wait_timeout, on_update=on_update)
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
    """The widgets of one box in :class:`DevboxTable`."""

    def __init__(self, table: DevboxTable, box: Devbox, now: datetime) -> None:
        self.name = box.name
        self.state = widgets.HTML(escape(status_line(box.state, reason(box.summary, box.message))))
        self.accelerator = widgets.HTML(_accelerator_html(box))
        self.environment = widgets.HTML(escape(environment_label(box.image)))
        stop = auto_stop_label(box.state, box.expires_at, now, box.stop_warning)
        self.auto_stop = widgets.HTML(escape(stop))
        stopped = box.state is models.DevboxState.STOPPED
        self.start_button = _action_button("Start", "play", f"Start {box.name}", not stopped)
        self.stop_button = _action_button("Stop", "stop", f"Stop {box.name}", stopped)
        self.delete_button = _action_button(
            "Delete", "trash", f"Delete {box.name} (its home volume is kept)", False
        )
        self.start_button.on_click(lambda _b: table.run(self.name, "start"))
        self.stop_button.on_click(lambda _b: table.run(self.name, "stop"))
        self.delete_button.on_click(lambda _b: self._delete(table))
        self.confirming = False

    def _delete(self, table: DevboxTable) -> None:
        # Deleting drops the box's compute at once, so it takes a second, deliberate click.
        if not self.confirming:
            self.confirming = True
            self.delete_button.description = "Confirm delete"
            self.delete_button.button_style = "danger"
            return
        table.run(self.name, "delete")

    def switch_off(self) -> None:
        """The controller is unreachable: every action would fail."""
        for button in (self.start_button, self.stop_button, self.delete_button):
            button.disabled = True

    def cells(self) -> list[widgets.Widget]:
        return [
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
    start/stop/delete."""

    HEADERS = ("Name", "State", "Accelerator", "Environment", "Auto-stop", "")

    def __init__(self, client: Client, **kwargs: Any) -> None:
        self.client = client
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
                grid_template_columns="auto minmax(14em, 3fr) auto auto auto max-content",
                grid_gap="4px 16px",
            )
        )
        super().__init__(children=[self.refresh_button, self.error, self.grid], **kwargs)
        self.add_class("devboxes-table")
        self.refresh()

    def refresh(self) -> None:
        """Re-read the boxes from the controller."""
        try:
            boxes = self.client.list()
        except DevboxesError as error:
            self.stale = True
            for row in self.rows.values():
                row.switch_off()
            notice = stale_notice(self.observed_at, datetime.now(UTC))
            self.error.value = f"{_error_html(notice)}<br>{_error_html(str(error))}"
            return
        now = datetime.now(UTC)
        self.stale = False
        self.observed_at = now
        self.rows = {box.name: _Row(self, box, now) for box in boxes}
        cells: list[widgets.Widget] = [widgets.HTML(f"<b>{h}</b>") for h in self.HEADERS]
        for row in self.rows.values():
            cells.extend(row.cells())
        if not boxes:
            cells.append(widgets.HTML(_note_html("No devboxes yet.")))
        self.grid.children = cells
        self.error.value = ""

    def run(self, name: str, action: str) -> None:
        """Start, stop or delete one box (keeping its storage), then refresh."""
        try:
            if action == "start":
                self.client.start(name)
            elif action == "stop":
                self.client.stop(name)
            elif action == "delete":
                self.client.delete(name)
            else:
                raise ValueError(f"unknown action {action!r}: use start, stop or delete")
        except DevboxesError as error:
            self.refresh()
            failed = _error_html(f"{action} {name}: {error!s}")
            # A stale list's notice stays on top; the failed action follows it.
            self.error.value = f"{self.error.value}<br>{failed}" if self.stale else failed
            return
        self.refresh()
