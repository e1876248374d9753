"""The widgets, driven from Python as a notebook user would drive them.

Picker tests use catalog data directly; launcher and table tests talk to the real
controller on the testbed through the ``controller_client`` fixture.
"""

from __future__ import annotations

import http.server
import uuid
from typing import Any

import pytest
from devboxes_jupyter import labels
from devboxes_jupyter.widgets import AcceleratorPicker, DevboxLauncher, DevboxTable
from support import L4_PROFILE, JsonHandler, serving
from traitlets import TraitError

from devboxes_sdk import _transport, models
from devboxes_sdk.client import Client
from devboxes_sdk.errors import NotFound

L4 = L4_PROFILE
AMD = models.GpuProfile(
    name="amd-mi210", display_name="AMD MI210", resource_name="amd.com/gpu", count=2
)
CATALOG = models.GpuCapabilities(enabled=True, default_profile="nvidia-l4", profiles=[L4, AMD])
READY_TIMEOUT = 180


def option_labels(picker: AcceleratorPicker) -> list[str]:
    return [label for label, _key in picker.dropdown.options]


class TestAcceleratorPicker:
    def test_cpu_only_is_first_and_selected(self) -> None:
        picker = AcceleratorPicker(CATALOG)
        assert option_labels(picker)[0] == labels.CPU_ONLY
        assert picker.dropdown.index == 0
        assert picker.value is None
        assert picker.dropdown.disabled is False

    def test_profiles_follow_in_catalog_order_with_the_default_marked(self) -> None:
        picker = AcceleratorPicker(CATALOG)
        assert option_labels(picker)[1:] == [
            labels.profile_label(L4),
            labels.profile_label(AMD),
        ]
        assert option_labels(picker)[1].endswith(" (default)")
        assert not option_labels(picker)[2].endswith(" (default)")

    def test_choosing_a_profile_sets_value_and_shows_its_description(self) -> None:
        picker = AcceleratorPicker(CATALOG)
        picker.dropdown.index = 1
        assert picker.value == "nvidia-l4"
        assert "One dedicated L4" in picker.help.value
        assert picker.dropdown.tooltip == "One dedicated L4"
        picker.dropdown.index = 0
        assert picker.value is None

    def test_setting_value_moves_the_dropdown(self) -> None:
        picker = AcceleratorPicker(CATALOG)
        picker.value = "amd-mi210"
        assert picker.dropdown.index == 2
        picker.value = None
        assert picker.dropdown.index == 0

    def test_unknown_profile_is_refused_with_the_choices(self) -> None:
        picker = AcceleratorPicker(CATALOG)
        with pytest.raises(TraitError, match="available: nvidia-l4, amd-mi210"):
            picker.value = "h100"
        assert picker.value is None

    def test_disabled_gpu_leaves_cpu_only_and_says_why(self) -> None:
        picker = AcceleratorPicker(models.GpuCapabilities(enabled=False))
        assert option_labels(picker) == [labels.CPU_ONLY]
        assert picker.dropdown.disabled is True
        assert "disabled by the operator" in picker.help.value
        with pytest.raises(TraitError, match="disabled"):
            picker.value = "nvidia-l4"


def offline() -> Client:
    # Port 9 on loopback: nothing listens, so every call fails fast with Unavailable.
    return Client("http://127.0.0.1:9", "offline-token-0123456789abcdef0123", timeout=2)


@pytest.fixture
def no_retry_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every retry is still made, without waiting between them."""
    monkeypatch.setattr(_transport, "_RETRY_DELAYS", (0.0,) * len(_transport._RETRY_DELAYS))


class TestLauncherWithoutController:
    @pytest.fixture
    def offline_client(self, no_retry_wait: None) -> Client:
        return offline()

    def test_bad_name_is_shown_inline(self, offline_client: Client) -> None:
        launcher = DevboxLauncher(offline_client)
        launcher.name.value = "Not Valid!"
        launcher.create_button.click()
        assert "invalid name" in launcher.error.value
        assert "Traceback" not in launcher.error.value
        assert launcher.box is None

    def test_bad_ttl_is_shown_inline(self, offline_client: Client) -> None:
        launcher = DevboxLauncher(offline_client)
        launcher.name.value = "fine"
        launcher.ttl_hours.value = 0
        launcher.create_button.click()
        assert "at least 1 hour" in launcher.error.value

    def test_unreachable_controller_is_explained_not_raised(self, offline_client: Client) -> None:
        launcher = DevboxLauncher(offline_client)
        assert "could not be loaded" in launcher.picker.help.value
        # Without a catalog there is no environment to choose: the choice is not shown.
        assert launcher.environment.layout.display == "none"
        assert launcher.environment.value == labels.DEFAULT_ENVIRONMENT_KEY
        launcher.name.value = "fine"
        launcher.create_button.click()
        assert "cannot reach the Devboxes API" in launcher.error.value


def test_environment_options_put_the_workspace_image_first_and_say_where_each_runs() -> None:
    images = models.ImageCapabilities.model_validate(
        {"enabled": True, "profiles": [
            {"name": "cuda", "display_name": "CUDA 12.8 workspace", "mode": "workspace"},
            {"name": "web-preview", "display_name": "Web preview", "mode": "sidecar",
             "ports": [{"name": "http", "container_port": 8080}]},
        ]}
    )  # fmt: skip
    assert labels.environment_options(images) == [
        ("Default workspace", ""),
        ("CUDA 12.8 workspace (as the workspace)", "cuda"),
        ("Web preview (beside the workspace)", "web-preview"),
    ]
    disabled = images.model_copy(update={"enabled": False})
    assert labels.environment_options(disabled) == [("Default workspace", "")]


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _created_box(client: Client, cleanup: list[str], prefix: str, **options: Any) -> str:
    """A new box of a unique name, deleted after the test; its name."""
    name = _unique(prefix)
    client.create(name, **options)
    cleanup.append(name)
    return name


def _default_profile(client: Client) -> str:
    catalog = client.capabilities().gpu
    assert catalog.enabled, "the session's controller always has GPU acceleration on"
    assert catalog.default_profile is not None
    return catalog.default_profile


class TestWithController:
    def test_picker_shows_the_controllers_catalog(self, controller_client: Client) -> None:
        profiles = controller_client.capabilities().gpu.profiles
        picker = AcceleratorPicker.from_client(controller_client)
        assert option_labels(picker)[0] == labels.CPU_ONLY
        assert picker.value is None
        assert option_labels(picker)[1:] == [labels.profile_label(p) for p in profiles]

    def test_launcher_creates_a_gpu_box_and_follows_it_to_ready(
        self, controller_client: Client, cleanup: list[str]
    ) -> None:
        profile = _default_profile(controller_client)
        launcher = DevboxLauncher(controller_client, wait_timeout=READY_TIMEOUT)
        launcher.name.value = _unique("wl")
        launcher.picker.value = profile
        launcher.create_button.click()
        cleanup.append(launcher.name.value)
        assert launcher.error.value == ""
        created = launcher.box
        assert created is not None
        # create() hands back the box as the controller answered, before any waiting.
        assert created.state is models.DevboxState.STARTING
        assert launcher.watcher is not None

        final = launcher.wait(READY_TIMEOUT + 30)
        assert final is not None
        assert final.state is models.DevboxState.READY, launcher.status.value
        assert "ready" in launcher.status.value
        assert final.gpu is not None
        assert final.gpu.profile == profile
        assert final.ssh_command
        assert final.ssh_command in launcher.ssh.value

    def test_launcher_creates_a_box_in_the_chosen_environment_and_the_table_shows_it(
        self, controller_client: Client, cleanup: list[str]
    ) -> None:
        images = controller_client.capabilities().images
        launcher = DevboxLauncher(controller_client)
        assert launcher.environment.layout.display is None
        assert [key for _label, key in launcher.environment.options] == [
            labels.DEFAULT_ENVIRONMENT_KEY,
            *(profile.name for profile in images.profiles),
        ]
        launcher.name.value = _unique("we")
        launcher.environment.value = "python"
        launcher.create_button.click()
        cleanup.append(launcher.name.value)
        assert launcher.error.value == launcher.environment_error.value == ""
        created = launcher.box
        assert created is not None
        assert created.image is not None
        assert created.image.profile == "python"

        table = DevboxTable(controller_client)
        assert "Environment" in table.HEADERS
        assert table.rows[created.name].environment.value == created.image.display_name

    def test_an_environment_that_does_not_fit_the_accelerator_is_refused_beside_it(
        self, controller_client: Client, cleanup: list[str]
    ) -> None:
        # The CUDA image runs on NVIDIA profiles only; the form's default accelerator is CPU.
        launcher = DevboxLauncher(controller_client)
        launcher.name.value = _unique("wx")
        launcher.environment.value = "cuda"
        launcher.create_button.click()
        cleanup.append(launcher.name.value)
        assert launcher.box is None
        assert launcher.error.value == ""
        assert "cuda" in launcher.environment_error.value
        # Choosing again clears the refusal.
        launcher.environment.value = "python"
        assert launcher.environment_error.value == ""

    def test_controller_refusal_is_shown_inline(
        self, controller_client: Client, cleanup: list[str]
    ) -> None:
        name = _created_box(controller_client, cleanup, "dup")
        launcher = DevboxLauncher(controller_client)
        launcher.name.value = name
        launcher.create_button.click()
        assert "409" in launcher.error.value
        assert launcher.box is None

    def test_table_lists_boxes_and_drives_stop_start_delete(
        self, controller_client: Client, cleanup: list[str]
    ) -> None:
        name = _created_box(controller_client, cleanup, "wt", ttl_hours=3)
        table = DevboxTable(controller_client)
        row = table.rows[name]
        assert labels.CPU_ONLY in row.accelerator.value
        assert row.auto_stop.value.startswith("in ")
        assert row.start_button.disabled is True

        row.stop_button.click()
        row = table.rows[name]
        assert row.state.value.startswith("stopped"), table.error.value
        assert row.start_button.disabled is False
        assert controller_client.get(name).state is models.DevboxState.STOPPED

        row.start_button.click()
        assert controller_client.get(name).state is not models.DevboxState.STOPPED

        row = table.rows[name]
        row.delete_button.click()
        assert row.delete_button.description == "Confirm delete"
        assert name in table.rows
        row.delete_button.click()
        assert name not in table.rows
        with pytest.raises(NotFound):
            controller_client.get(name)

    def test_table_shows_action_errors_inline(
        self, controller_client: Client, cleanup: list[str]
    ) -> None:
        name = _created_box(controller_client, cleanup, "wg")
        table = DevboxTable(controller_client)
        controller_client.delete(name)
        table.run(name, "stop")
        assert "404" in table.error.value
        assert name not in table.rows


@pytest.mark.usefixtures("no_retry_wait")
def test_table_reports_an_unreachable_controller() -> None:
    table = DevboxTable(offline())
    assert "cannot reach the Devboxes API" in table.error.value
    assert table.rows == {}


ONE_BOX = {"name": "atlas", "state": "ready", "preset": "small",
           "created_at": "2026-12-02T08:00:00Z", "message": "Ready for SSH."}  # fmt: skip


class _OneBox(http.server.ThreadingHTTPServer):
    """A controller that lists one ready box, on a port it can be restarted on."""

    def __init__(self, port: int = 0, box: dict[str, Any] = ONE_BOX) -> None:
        super().__init__(("127.0.0.1", port), _OneBoxHandler)
        self.box = box


class _OneBoxHandler(JsonHandler):
    server: _OneBox

    def do_GET(self) -> None:
        self.send_json(200, {"items": [self.server.box]})


@pytest.mark.usefixtures("no_retry_wait")
def test_table_marks_its_list_stale_with_actions_off_and_recovers() -> None:
    with serving(_OneBox()) as server:
        port = server.server_port
        client = Client(f"http://127.0.0.1:{port}", "one-box-token-0123456789abcdef0123")
        table = DevboxTable(client)
        row = table.rows["atlas"]
        assert not row.stop_button.disabled
        assert table.error.value == ""
    table.refresh()
    assert "Controller unreachable. The list below is less than a minute old" in table.error.value
    assert "cannot reach the Devboxes API" in table.error.value
    assert list(table.rows) == ["atlas"]
    assert row.stop_button.disabled
    assert row.delete_button.disabled
    table.run("atlas", "stop")
    # The notice stays on top, the failed action under it.
    error = table.error.value
    assert 0 <= error.index("Controller unreachable.") < error.index("stop atlas: cannot reach")

    with serving(_OneBox(port)):
        table.refresh()
        assert table.error.value == ""
        assert not table.rows["atlas"].stop_button.disabled


def test_table_shows_what_a_dra_box_got_under_its_accelerator() -> None:
    gpu = {"profile": "h100-or-a100", "display_name": "NVIDIA H100 or A100", "kind": "dra",
           "resource_name": "gpu.nvidia.com", "devices": "NVIDIA H100 80GB, else A100 40GB",
           "count": 1, "allocated": [{"product": "NVIDIA A100-SXM4-40GB", "memory": "40Gi",
                                      "alternative": 1}]}  # fmt: skip
    with serving(_OneBox(box={**ONE_BOX, "gpu": gpu})) as server:
        client = Client(
            f"http://127.0.0.1:{server.server_port}", "one-box-token-0123456789abcdef0123"
        )
        table = DevboxTable(client)
    accelerator, got = table.rows["atlas"].accelerator.value.split("<br>")
    assert accelerator == "NVIDIA H100 or A100 \N{MIDDLE DOT} NVIDIA H100 80GB, else A100 40GB"
    assert ">allocated NVIDIA A100-SXM4-40GB (40Gi, alternative 1)</span>" in got
