"""Pure unit tests of the CLI and the SDK's local logic: rendering, error parsing,
request bodies and argument parsing. Nothing here talks HTTP."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support import wait_for

from devboxes_sdk import (
    ApiError,
    AuthenticationError,
    Client,
    Conflict,
    Devbox,
    DevboxState,
    NotFound,
    PermissionDenied,
    Unavailable,
    ValidationError,
    models,
)
from devboxes_sdk import _render as render
from devboxes_sdk._cli_base import EXIT_USAGE
from devboxes_sdk._cli_commands import Progress, flag_message
from devboxes_sdk._cli_parser import build_parser
from devboxes_sdk._cli_ssh import service_argv as ssh_argv
from devboxes_sdk._completion import completion_script
from devboxes_sdk.cli import main
from devboxes_sdk.client import create_body
from devboxes_sdk.errors import BoxDegraded, StartTimeout, error_from_body

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
URL = "https://devboxes.example.com/"
TOKEN = "unit-test-token-" + "x" * 32

L4 = {
    "profile": "nvidia-l4",
    "display_name": "NVIDIA L4",
    "resource_name": "nvidia.com/gpu",
    "count": 1,
}


@pytest.fixture
def client() -> Iterator[Client]:
    with Client("https://devboxes.example.com", TOKEN) as instance:
        yield instance


def box_json(**fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "atlas",
        "state": "ready",
        "preset": "medium",
        "created_at": "2026-12-02T08:00:00Z",
        "expires_at": "2026-12-03T08:30:00Z",
        "ssh_host": "10.0.0.5",
        "ssh_port": 22,
        "ssh_user": "dev",
        "ssh_command": "ssh -p 22 dev@10.0.0.5",
        "gpu": L4,
    }
    data.update(fields)
    return data


def make_box(client: Client, **fields: Any) -> Devbox:
    data = box_json(**fields)
    return Devbox.model_validate(data)._bind(client, data)


def make_catalog(**fields: Any) -> models.GpuCapabilities:
    data: dict[str, Any] = {
        "enabled": True,
        "default_profile": "nvidia-l4",
        "profiles": [
            {
                "name": "nvidia-l4",
                "display_name": "NVIDIA L4",
                "description": "One dedicated L4",
                "resource_name": "nvidia.com/gpu",
                "count": 1,
                "default": True,
            },
            {
                "name": "mig-1g",
                "display_name": "A100 MIG 1g.10gb",
                "resource_name": "nvidia.com/mig-1g.10gb",
                "count": 2,
            },
        ],
    }
    data.update(fields)
    return models.GpuCapabilities.model_validate(data)


# -- relative times and tables -------------------------------------------------------


@pytest.mark.parametrize(
    ("delta", "expected"),
    [
        (timedelta(hours=23, minutes=59), "in 23h"),
        (timedelta(hours=47), "in 47h"),
        (timedelta(days=3, hours=1), "in 3d"),
        (timedelta(minutes=12, seconds=30), "in 12m"),
        (timedelta(seconds=45), "in 45s"),
        (timedelta(milliseconds=300), "now"),
        (-timedelta(minutes=5), "5m ago"),
        (-timedelta(hours=2), "2h ago"),
    ],
)
def test_relative_time(delta: timedelta, expected: str) -> None:
    assert render.relative_time(NOW + delta, NOW) == expected


def test_table_aligns_columns_without_trailing_blanks() -> None:
    text = render.table(("A", "LONGER"), [("wide-cell", "x"), ("y", "")])
    assert text.splitlines() == ["A          LONGER", "wide-cell  x", "y"]


def test_table_replaces_control_characters() -> None:
    text = render.table(("MSG",), [("bad\x1b[2Jmessage\r",)])
    assert "\x1b" not in text
    assert "\r" not in text
    assert "bad?[2Jmessage?" in text


def test_boxes_table(client: Client) -> None:
    boxes = [
        make_box(client),
        make_box(
            client,
            name="cpu-box",
            state="stopped",
            preset="small",
            gpu=None,
            ssh_command=None,
        ),
        make_box(
            client,
            name="late",
            state="starting",
            gpu=None,
            ssh_command=None,
            expires_at="2026-12-02T08:59:00Z",
        ),
    ]
    assert render.boxes_table(boxes, NOW).splitlines() == [
        "NAME     STATE     SIZE    AUTO-STOP       ACCELERATOR                     SSH",
        "atlas    ready     medium  in 23 h 30 min  NVIDIA L4 · 1 × nvidia.com/gpu  "
        "ssh -p 22 dev@10.0.0.5",
        "cpu-box  stopped   small   stopped         CPU only                        -",
        "late     starting  medium  due now         CPU only                        -",
    ]


def test_boxes_table_gains_a_reason_column_when_a_box_waits(client: Client) -> None:
    waiting = "Waiting for a free NVIDIA L4: 0 of 2 free, 2nd in line (estimate)"
    boxes = [
        make_box(client),
        make_box(client, name="queued", state="starting", ssh_command=None, summary=waiting),
    ]
    lines = render.boxes_table(boxes, NOW).splitlines()
    assert lines[0].split()[-1] == "REASON"
    assert lines[1].endswith("  -")
    assert lines[2].endswith(f"  {waiting}")


def test_boxes_table_names_owners_after_the_box_with_the_reason_last(client: Client) -> None:
    boxes = [
        make_box(client, name="mine", owner="ada", gpu=None, ssh_command=None),
        make_box(
            client, name="theirs", owner="grace", state="starting", gpu=None, summary="Pulling"
        ),
    ]
    lines = render.boxes_table(boxes, NOW, owners=True).splitlines()
    assert lines[0].split() == [
        "NAME",
        "OWNER",
        "STATE",
        "SIZE",
        "AUTO-STOP",
        "ACCELERATOR",
        "SSH",
        "REASON",
    ]
    assert lines[1].startswith("mine    ada    ready")
    assert lines[2].startswith("theirs  grace  starting")
    assert lines[2].endswith("  Pulling")
    assert "OWNER" not in render.boxes_table(boxes, NOW)


@pytest.mark.parametrize(
    ("owners", "me", "shown"),
    [
        # A person's own list: every box is theirs, so the column would repeat their name.
        (["ada", "ada"], models.WhoAmI(user="ada", mode="oidc"), False),
        # An admin's list of their own boxes only, as the operator's single-user lists are.
        (["ada"], models.WhoAmI(user="ada", mode="oidc", admin=True), False),
        (["operator"], models.WhoAmI(user="operator", mode="operator", admin=True), False),
        (["ada"], models.WhoAmI(user="operator", mode="operator", admin=True), True),
        # A box of someone else's is named whoever lists it.
        (["ada", "grace"], models.WhoAmI(user="ada", mode="oidc"), True),
    ],
)
def test_the_owner_column_appears_when_a_box_is_someone_elses(
    client: Client, owners: list[str], me: models.WhoAmI, shown: bool
) -> None:
    boxes = [make_box(client, name=f"box-{i}", owner=owner) for i, owner in enumerate(owners)]
    assert render.shows_owners(boxes, me) is shown


def test_the_volumes_table_names_owners_after_the_volume_when_asked() -> None:
    volumes = [
        models.Volume(
            name=name,
            claim=f"devbox-{name}-home",
            size="10Gi",
            created_at=NOW - timedelta(days=2),
            last_profile=profile,
            owner=owner,
        )
        for name, owner, profile in (("kept", "ada", None), ("old-l4", "grace", "nvidia-l4"))
    ]
    plain = render.volumes_table(volumes, NOW).splitlines()
    assert plain[0].split() == ["NAME", "SIZE", "CREATED", "LAST", "PROFILE", "CLAIM"]
    lines = render.volumes_table(volumes, NOW, owners=True).splitlines()
    assert lines[0].split() == ["NAME", "OWNER", "SIZE", "CREATED", "LAST", "PROFILE", "CLAIM"]
    assert lines[1].split()[:3] == ["kept", "ada", "10Gi"]
    assert lines[2].split()[:3] == ["old-l4", "grace", "10Gi"]
    assert lines[2].split()[-2:] == ["nvidia-l4", "devbox-old-l4-home"]
    assert render.shows_owners(volumes, models.WhoAmI(user="ada", mode="oidc")) is True


def test_profiles_table_marks_default() -> None:
    assert render.profiles_table(make_catalog(), None).splitlines() == [
        "PROFILE              NAME              COUNT  RESOURCE                FREE  WAITING  "
        "DESCRIPTION",
        "nvidia-l4 (default)  NVIDIA L4         1      nvidia.com/gpu          -     -        "
        "One dedicated L4",
        "mig-1g               A100 MIG 1g.10gb  2      nvidia.com/mig-1g.10gb  -     -        -",
    ]


def test_profiles_table_shows_what_a_dra_profile_gives_not_its_device_class() -> None:
    dra = {
        "name": "h100",
        "display_name": "NVIDIA H100",
        "kind": "dra",
        "resource_name": "gpu.nvidia.com",
        "devices": "NVIDIA H100 80GB",
        "count": 1,
    }
    lines = render.profiles_table(make_catalog(profiles=[dra]), None).splitlines()
    assert lines[1].split() == [
        "h100",
        "NVIDIA",
        "H100",
        "1",
        "NVIDIA",
        "H100",
        "80GB",
        "-",
        "-",
        "-",
    ]


def test_profiles_table_shows_free_and_waiting_or_why_free_is_unknown() -> None:
    counted = models.GpuAvailability.model_validate(
        {
            "observed_at": "2026-12-02T09:00:00Z",
            "profiles": [
                {"name": "nvidia-l4", "available": 0, "capacity": 2, "waiting": 3},
                {"name": "mig-1g", "available": 5, "capacity": 7, "waiting": 0},
            ],
        }
    )
    lines = render.profiles_table(make_catalog(), counted).splitlines()
    assert lines[1].split("nvidia.com/gpu")[1].split()[:4] == ["0", "of", "2", "3"]
    assert lines[2].split("nvidia.com/mig-1g.10gb")[1].split()[:4] == ["5", "of", "7", "0"]
    unknown = models.GpuAvailability.model_validate(
        {
            "observed_at": "2026-12-02T09:00:00Z",
            "profiles": [{"name": "nvidia-l4", "waiting": 1, "reason": "forbidden"}],
        }
    )
    text = render.profiles_table(make_catalog(), unknown)
    assert text.splitlines()[1].split("nvidia.com/gpu")[1].split()[:2] == ["?", "1"]
    assert text.endswith("FREE is unknown: forbidden")


def test_doctor_text_puts_the_fix_on_the_finding_line() -> None:
    report = models.DoctorReport(
        ok=False,
        checks=[
            models.DoctorCheck(
                profile="amd",
                check="resource",
                verdict="fail",
                message="no node advertises amd.com/gpu",
                fix="install the device plugin or GPU Operator",
            ),
            models.DoctorCheck(check="storage-class", verdict="pass", message="ok", fix=None),
        ],
    )
    lines = render.doctor_text(report).splitlines()
    assert lines[1].startswith("FAIL")
    assert lines[1].split(maxsplit=3)[1:] == [
        "amd",
        "resource",
        "no node advertises amd.com/gpu: install the device plugin or GPU Operator",
    ]
    assert lines[2].split() == ["PASS", "-", "storage-class", "ok"]
    assert lines[-1] == "1 check(s) failed"


def test_catalog_marks_its_default_profile() -> None:
    catalog = make_catalog()
    assert [p.name for p in catalog.profiles if p.default] == [catalog.default_profile]
    assert [p.name for p in catalog.profiles] == ["nvidia-l4", "mig-1g"]
    mig = catalog.profile("mig-1g")
    assert mig is not None
    assert mig.count == 2
    assert catalog.profile("h100") is None


def test_capabilities_without_gpu_are_a_disabled_catalog() -> None:
    catalog = models.Capabilities.model_validate({}).gpu
    assert (catalog.enabled, catalog.default_profile, catalog.profiles) == (False, None, [])


def test_box_details_lists_every_field(client: Client) -> None:
    box = make_box(
        client,
        state="starting",
        message="Scheduling blocked: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        repository="octo/repo",
        storage_size="30Gi",
        restarts=2,
        owner="ada",
    )
    lines = dict(line.split(":", 1) for line in render.box_details(box, NOW, URL).splitlines())
    assert lines["Owner"].strip() == "ada"
    assert lines["State"].strip() == "starting"
    assert lines["Message"].strip().endswith("3 Insufficient nvidia.com/gpu.")
    assert lines["Accelerator"].strip() == "NVIDIA L4 · 1 × nvidia.com/gpu"
    assert lines["Auto-stop"].strip() == "2026-12-03T08:30:00+00:00 (in 23 h 30 min)"
    assert lines["Created"].strip() == "2026-12-02T08:00:00+00:00 (1h ago)"
    assert lines["Repository"].strip() == "octo/repo"
    assert lines["Restarts"].strip() == "2"


def test_box_details_link_each_declared_tcp_port_through_the_dashboard(client: Client) -> None:
    ports = [
        {"name": "http", "container_port": 8080},
        {"name": "lab", "container_port": 8888, "protocol": "TCP"},
        {"name": "dns", "container_port": 5353, "protocol": "UDP"},
    ]
    image = {"profile": "web", "display_name": "Web", "mode": "sidecar", "ports": ports}
    box = make_box(client, name="site", image=image)
    lines = dict(line.split(":", 1) for line in render.box_details(box, NOW, URL).splitlines())
    assert lines["Previews"].strip() == (
        "https://devboxes.example.com/dashboard/devboxes/site/ports/8080/ "
        "https://devboxes.example.com/dashboard/devboxes/site/ports/8888/"
    )
    without = render.box_details(make_box(client), NOW, URL).splitlines()
    assert "Previews:    -" in without


def test_box_details_show_the_dra_devices_allocated(client: Client) -> None:
    gpu = {
        "profile": "h100-or-a100",
        "display_name": "NVIDIA H100 or A100",
        "kind": "dra",
        "resource_name": "gpu.nvidia.com",
        "devices": "NVIDIA H100 80GB, else A100 40GB",
        "count": 1,
        "allocated": [
            {"product": "NVIDIA A100-SXM4-40GB", "memory": "40Gi", "alternative": 1},
            {"product": None, "memory": None, "alternative": 0},
        ],
    }
    box = make_box(client, gpu=gpu)
    lines = dict(line.split(":", 1) for line in render.box_details(box, NOW, URL).splitlines())
    assert lines["Accelerator"].strip() == "NVIDIA H100 or A100 · NVIDIA H100 80GB, else A100 40GB"
    assert lines["Allocated"].strip() == (
        "NVIDIA A100-SXM4-40GB (40Gi, alternative 1), unnamed device"
    )
    assert "Allocated" not in render.box_details(make_box(client), NOW, URL)


@pytest.mark.parametrize(
    ("activity", "restart", "shown"),
    [
        (None, None, ("-", "not required")),
        ({"state": "unknown"}, None, ("unknown (no activity agent reports; never", "not required")),
        (
            {
                "state": "idle",
                "idle_since": "2026-12-02T08:37:00Z",
                "stops_at": "2026-12-02T09:37:00Z",
            },
            "sidecar agent added",
            ("idle for 23m; stops in 37m", "required: sidecar agent added"),
        ),
    ],
)
def test_box_details_show_activity_and_a_required_restart(
    client: Client, activity: Any, restart: str | None, shown: tuple[str, str]
) -> None:
    box = make_box(
        client, activity=activity, restart_required=restart is not None, restart_reason=restart
    )
    lines = dict(line.split(":", 1) for line in render.box_details(box, NOW, URL).splitlines())
    assert lines["Activity"].strip().startswith(shown[0])
    assert lines["Restart"].strip() == shown[1]


def test_box_keeps_raw_json_and_aware_datetimes(client: Client) -> None:
    box = make_box(client, future_field={"kept": True})
    assert box.raw["future_field"] == {"kept": True}
    assert box.created_at.tzinfo is not None
    assert box.state is DevboxState.READY
    assert TOKEN not in repr(box)
    box.raw["name"] = "changed"
    assert box.name == "atlas"


# -- error parsing -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (401, AuthenticationError),
        (403, PermissionDenied),
        (404, NotFound),
        (409, Conflict),
        (503, Unavailable),
        (500, ApiError),
        (418, ApiError),
    ],
)
def test_status_maps_to_error_class(status: int, kind: type[ApiError]) -> None:
    error = error_from_body(status, {"detail": "something happened"})
    assert type(error) is kind
    assert (error.status, error.detail) == (status, "something happened")
    assert str(error) == f"Devboxes API returned {status}: something happened"


def test_validation_error_keeps_field_errors() -> None:
    body = {
        "detail": [
            {"type": "value_error", "loc": ["body", "gpu", "profile"], "msg": "unknown profile"},
            {"type": "missing", "loc": ["body", "name"], "msg": "Field required"},
        ]
    }
    error = error_from_body(422, body)
    assert isinstance(error, ValidationError)
    assert [e.loc for e in error.errors] == [["body", "gpu", "profile"], ["body", "name"]]
    assert str(error) == (
        "Devboxes API returned 422: gpu.profile: unknown profile; name: Field required"
    )


def test_plain_422_detail_is_a_validation_error() -> None:
    error = error_from_body(422, {"detail": "Kubernetes rejected the object: too big"})
    assert isinstance(error, ValidationError)
    assert error.detail == "Kubernetes rejected the object: too big"


def test_non_json_body_is_summarised() -> None:
    html = "<html>\n<body><h1>502 Bad Gateway</h1></body>\n</html>" + " pad" * 100
    error = error_from_body(502, None, text=html, reason="Bad Gateway")
    assert error.status == 502
    assert "\n" not in error.detail
    assert len(error.detail) <= 200


def test_empty_body_falls_back_to_reason() -> None:
    assert error_from_body(500, None, text="", reason="Internal Server Error").detail == (
        "Internal Server Error"
    )


def test_unexpected_detail_shapes_do_not_crash() -> None:
    assert error_from_body(400, {"detail": [1, 2]}).detail == "[1, 2]"
    assert error_from_body(400, {"detail": {"a": 1}}).detail == "{'a': 1}"
    assert error_from_body(400, ["not", "a", "mapping"], text="raw").detail == "raw"


# -- create bodies -------------------------------------------------------------------


def test_create_body_gpu_forms() -> None:
    assert "gpu" not in create_body("atlas")
    assert "gpu" not in create_body("atlas", gpu=False)
    assert create_body("atlas", gpu=True)["gpu"] == {}
    assert create_body("atlas", gpu="nvidia-l4")["gpu"] == {"profile": "nvidia-l4"}
    profile = models.GpuProfile(
        name="mig-1g", display_name="MIG", resource_name="nvidia.com/mig-1g.10gb", count=1
    )
    assert create_body("atlas", gpu=profile)["gpu"] == {"profile": "mig-1g"}
    assert create_body("atlas", gpu=models.GpuRequest())["gpu"] == {}
    wanted = models.GpuRequest(profile="nvidia-l4")
    assert create_body("atlas", gpu=wanted)["gpu"] == {"profile": "nvidia-l4"}


def test_create_body_image_forms() -> None:
    assert "image" not in create_body("atlas")
    assert create_body("atlas", image=" web-preview ")["image"] == "web-preview"
    profile = models.ImageProfile(name="pytorch", display_name="PyTorch", mode="workspace")
    assert create_body("atlas", gpu=True, image=profile) == {
        "name": "atlas",
        "preset": "small",
        "ttl_hours": 24,
        "gpu": {},
        "image": "pytorch",
    }
    with pytest.raises(TypeError, match="image must be"):
        create_body("atlas", image=True)  # type: ignore[arg-type]


def test_a_server_without_image_profiles_offers_none() -> None:
    old = models.Capabilities.model_validate({"gpu": {"enabled": False}})
    assert (old.images.enabled, old.images.profiles) == (False, [])
    assert old.images.profile("python") is None
    box = models.Devbox.model_validate(
        {"name": "atlas", "state": "ready", "preset": "small", "created_at": "2030-01-01T00:00:00Z"}
    )
    assert box.image is None
    assert render.image_text(box.image) == "-"


def test_create_body_normalises_and_omits_empty_repository() -> None:
    body = create_body("  Atlas ", preset="large", ttl_hours=8, repository="  ")
    assert body == {"name": "atlas", "preset": "large", "ttl_hours": 8}


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"name": "-bad-"}, "name: invalid name"),
        ({"name": "ok", "ttl_hours": 0}, "ttl_hours:"),
        ({"name": "ok", "preset": "huge"}, "preset:"),
        ({"name": "ok", "repository": "not a repo"}, "repository: repository must be"),
        ({"name": "ok", "gpu": " "}, "gpu.profile: profile name is empty"),
        ({"name": "ok", "image": ""}, "image: image profile name is empty"),
        ({"name": "ok", "image": "x" * 513}, "image: String should have at most 512"),
    ],
)
def test_create_body_is_validated_locally(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError) as caught:
        create_body(**kwargs)
    assert caught.value.local
    assert caught.value.status == 422
    assert fragment in str(caught.value)
    assert str(caught.value).startswith("invalid request: ")


def test_client_rejects_bad_name_before_any_request(client: Client) -> None:
    with pytest.raises(ValidationError, match="invalid name"):
        client.get("../secrets")


@pytest.mark.parametrize(
    ("name", "code_point"),
    [
        ("\N{KELVIN SIGN}ube", "U+212A (KELVIN SIGN)"),
        ("atl\N{CYRILLIC SMALL LETTER A}s", "U+0430 (CYRILLIC SMALL LETTER A)"),
        ("atlas\N{NO-BREAK SPACE}", "U+00A0 (NO-BREAK SPACE)"),
    ],
)
def test_non_ascii_lookalike_names_are_refused_not_normalised(name: str, code_point: str) -> None:
    with pytest.raises(ValueError, match=re.escape(code_point)) as caught:
        models.normalize_name(name)
    assert models.NAME_RULE in str(caught.value)
    with pytest.raises(ValidationError, match=re.escape(code_point)):
        create_body(name)


def test_upper_case_names_are_lowered() -> None:
    assert models.normalize_name(" UPPER ") == "upper"


# -- waiting errors ------------------------------------------------------------------


def test_start_timeout_carries_the_scheduler_reason(client: Client) -> None:
    reason = "Scheduling blocked: 0/5 nodes are available: 5 Insufficient nvidia.com/gpu."
    box = make_box(client, state="starting", message=reason)
    error = StartTimeout(box, 30)
    assert (error.state, error.message, error.box) == (DevboxState.STARTING, reason, box)
    assert isinstance(error, TimeoutError)
    assert str(error) == f"atlas was not ready within 30s (starting — {reason})"


def test_start_timeout_says_the_place_in_line_when_the_controller_sends_one(
    client: Client,
) -> None:
    gated = "Scheduling blocked: in line for a device"
    summary = "Waiting for a free NVIDIA L4: 0 of 2 free, 1st in line"
    box = make_box(client, state="starting", message=gated, summary=summary)
    error = StartTimeout(box, 30)
    assert (error.message, error.reason) == (gated, summary)
    assert str(error) == f"atlas was not ready within 30s (starting — {summary})"


def test_box_degraded_carries_the_reason(client: Client) -> None:
    box = make_box(client, state="degraded", message="ImagePullBackOff: not found")
    assert str(BoxDegraded(box)) == "atlas is degraded: ImagePullBackOff: not found"


SCHEDULER_SENTENCE = (
    "Scheduling blocked: 0/7 nodes are available: 2 Insufficient nvidia.com/gpu, 5 node(s) "
    "didn't match Pod's node affinity/selector. no new claims to deallocate, preemption: "
    "0/7 nodes are available: 2 No preemption victims found for incoming pod, 5 Preemption "
    "is not helpful for scheduling."
)


@pytest.mark.parametrize(
    ("message", "short"),
    [
        (SCHEDULER_SENTENCE, "Scheduling blocked: Insufficient nvidia.com/gpu"),
        (
            "Scheduling blocked: 0/7 nodes are available: 5 node(s) didn't match Pod's node "
            "affinity/selector, 2 Insufficient amd.com/gpu. preemption: not helpful",
            "Scheduling blocked: Insufficient amd.com/gpu",
        ),
        (
            "Scheduling blocked: 0/4 nodes are available: 4 node(s) had untolerated taint "
            "{nvidia.com/gpu: }.",
            "Scheduling blocked: node(s) had untolerated taint {nvidia.com/gpu: }",
        ),
        (
            "Waiting for the SSH server to become ready.",
            "Waiting for the SSH server to become ready.",
        ),
        ("Scheduling blocked: x", "Scheduling blocked: x"),
        (
            "Scheduling blocked: 0/3 nodes are available: ",
            "Scheduling blocked: 0/3 nodes are available: ",
        ),
    ],
)
def test_short_reason_keeps_one_scheduler_clause(message: str, short: str) -> None:
    assert render.short_reason(message) == short


def test_unbound_claims_while_starting_is_shown_as_waiting_for_storage(client: Client) -> None:
    message = (
        "Scheduling blocked: 0/7 nodes are available: pod has unbound immediate "
        "PersistentVolumeClaims. not found"
    )
    starting = make_box(client, state="starting", message=message)
    assert render.progress_line(starting) == "atlas: starting — Waiting for the home volume."
    degraded = make_box(client, state="degraded", message=message)
    assert "unbound immediate PersistentVolumeClaims" in render.progress_line(degraded)
    assert render.box_details(starting, NOW, URL).count("unbound immediate") == 1


def test_status_keeps_the_whole_scheduler_sentence(client: Client) -> None:
    box = make_box(client, state="starting", message=SCHEDULER_SENTENCE)
    assert f"Message:     {SCHEDULER_SENTENCE}" in render.box_details(box, NOW, URL).splitlines()
    assert render.progress_line(box) == (
        "atlas: starting — Scheduling blocked: Insufficient nvidia.com/gpu"
    )


def test_progress_of_a_waiting_box_gives_its_estimated_place_in_line(client: Client) -> None:
    waiting = "Waiting for a free NVIDIA L4: 0 of 2 free, 2nd in line (estimate)"
    box = make_box(client, state="starting", message=SCHEDULER_SENTENCE, summary=waiting)
    assert render.progress_line(box) == f"atlas: starting — {waiting}"
    # devbox status keeps both: the one line and the scheduler's whole sentence.
    details = render.box_details(box, NOW, URL)
    assert waiting in details
    assert SCHEDULER_SENTENCE in details
    # A CPU box keeps the scheduler's gist: its summary only says it waits for room.
    cpu = make_box(
        client,
        state="starting",
        gpu=None,
        message=SCHEDULER_SENTENCE,
        summary="Waiting for a node with room for this box.",
    )
    assert render.progress_line(cpu) == (
        "atlas: starting — Scheduling blocked: Insufficient nvidia.com/gpu"
    )
    # A box that no longer starts says what its message says.
    degraded = make_box(client, state="degraded", message="CrashLoopBackOff: x", summary="x")
    assert render.progress_line(degraded) == "atlas: degraded — CrashLoopBackOff: x"


@pytest.mark.parametrize(
    ("text", "width", "ellipsis", "fitted"),
    [
        ("short", 10, "…", "short"),
        ("exactly-10", 10, "…", "exactly-10"),
        ("a longer line", 10, "…", "a longer …"),
        ("a longer line", 10, "...", "a longe..."),
    ],
)
def test_fit_marks_the_cut(text: str, width: int, ellipsis: str, fitted: str) -> None:
    assert render.fit(text, width, ellipsis) == fitted
    assert len(render.fit(text, width, ellipsis)) <= width


class _Terminal(io.StringIO):
    encoding = "utf-8"

    def isatty(self) -> bool:
        return True


class _Clock:
    """Seconds that pass only when a test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("columns", "shown"),
    [
        (90, "trainer: starting — Scheduling blocked: Insufficient nvidia.com/gpu (0 s)"),
        (40, "trainer: starting — Scheduling block…"),
    ],
)
def test_spinner_keeps_the_reason_within_the_terminal_width(
    client: Client, monkeypatch: pytest.MonkeyPatch, columns: int, shown: str
) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    terminal = _Terminal()
    box = make_box(client, name="trainer", state="starting", message=SCHEDULER_SENTENCE)
    with Progress(terminal, clock=_Clock()) as progress:
        progress.update(box)
    frames = [frame for frame in terminal.getvalue().split("\r\x1b[2K") if frame]
    assert frames
    for frame in frames:
        assert len(frame) < columns
        assert frame[2:] == shown


def test_progress_prints_each_change_once_without_a_tty_with_the_seconds_since_asked(
    client: Client,
) -> None:
    stream = io.StringIO()
    clock = _Clock()
    progress = Progress(stream, clock=clock)
    starting = make_box(client, state="starting", message="Scheduling blocked: x")
    progress.update(starting)
    clock.now += 3.7
    progress.update(starting)
    clock.now += 5
    progress.update(make_box(client, state="ready", message=None))
    progress.close()
    assert stream.getvalue().splitlines() == [
        "atlas: starting — Scheduling blocked: x (after 0 s)",
        "atlas: ready (after 8 s)",
    ]


def test_the_spinner_counts_the_current_step_and_the_whole_wait(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    ssh = "Waiting for the SSH server to become ready."
    terminal = _Terminal()
    clock = _Clock()
    with Progress(terminal, clock=clock) as progress:
        progress.update(make_box(client, state="starting", message="Waiting for the scheduler."))
        scheduler = "atlas: starting — Waiting for the scheduler. (0 s)"
        wait_for(lambda: scheduler in terminal.getvalue(), timeout=5)
        clock.now += 7.2
        progress.update(make_box(client, state="starting", message=ssh))
        clock.now += 2.5
        wait_for(lambda: f"{ssh} (2 s; 9 s in all)" in terminal.getvalue(), timeout=5)


# -- ssh -----------------------------------------------------------------------------


def test_ssh_argv_uses_the_fields_not_the_ssh_command(client: Client) -> None:
    box = make_box(
        client,
        ssh_host="box.example.com",
        ssh_port=2222,
        ssh_user="dev",
        ssh_command="ssh -o ProxyCommand=evil -p 9 someone@elsewhere",
    )
    assert ssh_argv(box, ["--", "-L", "8888:localhost:8888"]) == [
        "ssh",
        "-p",
        "2222",
        "dev@box.example.com",
        "-L",
        "8888:localhost:8888",
    ]


def test_ssh_argv_without_a_user_leaves_it_to_ssh(client: Client) -> None:
    # A controller older than the ssh_user field names no user.
    box = make_box(client, ssh_user=None, ssh_host="10.1.2.3", ssh_port=30022)
    assert ssh_argv(box, []) == ["ssh", "-p", "30022", "10.1.2.3"]


def test_ssh_argv_refuses_option_like_user(client: Client) -> None:
    box = make_box(client, ssh_user="-oProxyCommand=evil")
    with pytest.raises(Exception, match="unusable SSH user"):
        ssh_argv(box, [])


def test_ssh_argv_refuses_option_like_host(client: Client) -> None:
    box = make_box(client, ssh_command=None, ssh_host="-oProxyCommand=evil")
    with pytest.raises(Exception, match="no usable SSH address"):
        ssh_argv(box, [])


# -- argument parsing and exit codes ---------------------------------------------------


def test_global_options_work_before_and_after_the_command() -> None:
    parser = build_parser()
    before = parser.parse_args(["--json", "--url", "https://a.example.com", "list"])
    after = parser.parse_args(["list", "--json", "--url", "https://a.example.com"])
    for args in (before, after):
        assert args.json is True
        assert args.url == "https://a.example.com"
        assert args.token is None


def test_create_arguments() -> None:
    args = build_parser().parse_args(
        ["create", "Atlas", "--preset", "large", "--ttl", "8", "--gpu-profile", "mig-1g"]
    )
    assert (args.name, args.preset, args.ttl, args.gpu, args.gpu_profile) == (
        "atlas",
        "large",
        8,
        False,
        "mig-1g",
    )
    assert (args.no_wait, args.ssh, args.timeout) == (False, False, 600.0)


def test_ssh_passes_remaining_arguments() -> None:
    args = build_parser().parse_args(["ssh", "atlas", "--", "-A", "nvidia-smi"])
    assert args.ssh_args == ["-A", "nvidia-smi"]


@pytest.mark.parametrize(
    ("argv", "prog", "message"),
    [
        ([], "devbox", "the following arguments are required: COMMAND"),
        (["create"], "devbox create", "the following arguments are required: NAME"),
        (["create", "Bad_Name"], "devbox create", "argument NAME: invalid name 'Bad_Name'"),
        (
            ["create", "\N{KELVIN SIGN}ube"],
            "devbox create",
            "argument NAME: invalid name '\N{KELVIN SIGN}ube': "
            "it contains the non-ASCII character U+212A",
        ),
        (
            ["create", "atlas", "--gpu", "--gpu-profile", "x"],
            "devbox create",
            "argument --gpu-profile: not allowed with argument --gpu",
        ),
        (["create", "atlas", "--ttl", "0"], "devbox create", "argument --ttl: must be at least 1"),
        (
            ["create", "atlas", "--timeout", "-5"],
            "devbox create",
            "argument --timeout: must be a positive number of seconds",
        ),
        (["create", "atlas", "--preset", "huge"], "devbox create", "argument --preset: invalid"),
        (
            ["create", "atlas", "--repo", "not a repo"],
            "devbox create",
            "argument --repo: repository must be 'owner/repo' or an https://github.com/ URL, "
            "got 'not a repo'",
        ),
        (["gpu"], "devbox gpu", "the following arguments are required: COMMAND"),
        (["completion", "fish"], "devbox completion", "argument shell: invalid choice: 'fish'"),
        (["frobnicate"], "devbox", "argument COMMAND: invalid choice: 'frobnicate'"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], prog: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "Traceback" not in err
    first, hint = err.splitlines()
    assert first.startswith(f"{prog}: error: {message}")
    assert hint == f"Run '{prog} --help' for usage."


@pytest.mark.parametrize(
    ("detail", "message"),
    [
        (
            [
                {
                    "type": "less_than_equal",
                    "loc": ["body", "ttl_hours"],
                    "msg": "must be at most 168",
                }
            ],
            "--ttl must be at most 168 hours",
        ),
        (
            [{"type": "less_than_equal", "loc": ["body", "ttl_hours"], "msg": "must be at most 1"}],
            "--ttl must be at most 1 hour",
        ),
        # A refusal that names no field is shown as the controller words it.
        (
            "unknown GPU profile 'h100'; available profiles: nvidia-l4, amd-rocm",
            "unknown GPU profile 'h100'; available profiles: nvidia-l4, amd-rocm",
        ),
        (
            [{"type": "value_error", "loc": ["body", "gpu", "profile"], "msg": "unknown"}],
            "--gpu-profile: unknown",
        ),
        (
            [{"type": "value_error", "loc": ["body", "gpu"], "msg": "GPU is disabled"}],
            "--gpu: GPU is disabled",
        ),
        (
            [
                {"type": "less_than_equal", "loc": ["body", "ttl_hours"], "msg": "too long"},
                {"type": "value_error", "loc": ["body", "repository"], "msg": "bad"},
                {"type": "value_error", "loc": ["body", "name"], "msg": "invalid name 'X'"},
                {"type": "missing", "loc": ["body", "future"], "msg": "Field required"},
            ],
            "--ttl: too long; --repo: bad; invalid name 'X'; future: Field required",
        ),
    ],
)
def test_refused_create_is_explained_with_the_flags(detail: object, message: str) -> None:
    error = error_from_body(422, {"detail": detail})
    assert isinstance(error, ValidationError)
    assert flag_message(error) == message


def test_locally_refused_create_is_explained_with_the_flags() -> None:
    with pytest.raises(ValidationError) as caught:
        create_body("atlas", gpu=" ")
    assert flag_message(caught.value) == "--gpu-profile: profile name is empty"


@pytest.mark.parametrize("argv", [["--json", "list", "-q"], ["gpu", "profiles", "-q", "--json"]])
def test_quiet_and_json_together_are_refused(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == EXIT_USAGE
    out, err = capsys.readouterr()
    # Asked for JSON, the refusal is JSON too.
    assert err == ""
    assert json.loads(out) == {
        "error": {
            "kind": "usage",
            "message": "-q and --json cannot be combined (-q prints names, --json the JSON)",
            "status": None,
        }
    }


@pytest.fixture
def no_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("DEVBOX_URL", "DEVBOX_TOKEN", "DEVBOX_CONFIG"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_config")
def test_missing_configuration_is_a_clean_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 1
    err = capsys.readouterr().err
    assert "no Devboxes URL configured" in err
    assert "Traceback" not in err
    assert err == "no Devboxes URL configured: run 'devbox login --url URL' or set DEVBOX_URL\n"


@pytest.mark.usefixtures("no_config")
def test_missing_token_names_the_cli_ways(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", "https://a.example.com", "list"]) == 1
    err = capsys.readouterr().err
    assert err == "no Devboxes token configured: run 'devbox login' or set DEVBOX_TOKEN\n"


@pytest.mark.usefixtures("no_config")
def test_bad_url_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", "http://a.example.com", "--token", TOKEN, "list"]) == 1
    assert capsys.readouterr().err.rstrip().endswith("(from --url)")


@pytest.mark.usefixtures("no_config")
def test_bad_token_never_printed(capsys: pytest.CaptureFixture[str]) -> None:
    secret = "secret with spaces " + "s" * 20
    assert main(["--url", "https://a.example.com", "--token", secret, "list"]) == 1
    captured = capsys.readouterr()
    assert "whitespace" in captured.err
    assert secret not in captured.err + captured.out


@pytest.mark.usefixtures("no_config")
def test_purge_without_tty_or_yes_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("atlas\n"))
    assert main(["delete", "atlas", "--purge"]) == EXIT_USAGE
    assert "pass --yes" in capsys.readouterr().err


def test_ssh_with_no_wait_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["create", "atlas", "--ssh", "--no-wait"]) == EXIT_USAGE
    assert "--ssh" in capsys.readouterr().err


@pytest.mark.usefixtures("no_config")
def test_login_without_url_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["login"]) == EXIT_USAGE
    assert "--url" in capsys.readouterr().err


# -- completion ----------------------------------------------------------------------


def completion_in(tmp_path: Path, shell: str) -> tuple[str, Path]:
    """The shell's executable and a file holding devbox's completion script for it."""
    executable = shutil.which(shell)
    if executable is None:
        pytest.skip(f"{shell} is not installed")
    script = tmp_path / f"_devbox.{shell}"
    script.write_text(completion_script(build_parser(), shell))
    return executable, script


def test_bash_completion_is_valid_bash(tmp_path: Path) -> None:
    bash, script = completion_in(tmp_path, "bash")
    assert "complete -o bashdefault -F _shtab_devbox devbox" in script.read_text()
    subprocess.run([bash, "-n", str(script)], check=True)


def test_bash_completion_completes_commands_choices_boxes_and_profiles(tmp_path: Path) -> None:
    # Each profile flag completes from its own catalog.
    bash, script = completion_in(tmp_path, "bash")
    # A stand-in devbox on PATH answers the two listings the completion asks for.
    fake = tmp_path / "bin" / "devbox"
    fake.parent.mkdir()
    fake.write_text(
        '#!/bin/sh\ncase "$*" in\n'
        '  "list -q") printf "atlas\\nbeta\\nalpha\\n" ;;\n'
        '  "gpu profiles -q") printf "nvidia-l4\\namd-rocm\\n" ;;\n'
        '  "image profiles -q") printf "pytorch\\nweb-preview\\n" ;;\n'
        "esac\n"
    )
    fake.chmod(0o755)
    lines = [
        ("devbox st", 1),
        ('devbox create x --preset ""', 4),
        ("devbox stop a", 2),
        ("devbox create x --gpu-profile n", 4),
        ("devbox create x --image w", 4),
        ("devbox image p", 2),
    ]
    probe = f"PATH={fake.parent}:$PATH; source {script}\n" + "".join(
        f'COMP_WORDS=({words}); COMP_CWORD={cword}; _shtab_devbox; echo "${{COMPREPLY[*]}}"\n'
        for words, cword in lines
    )
    result = subprocess.run([bash, "-c", probe], text=True, capture_output=True, check=True)
    assert result.stdout.splitlines() == [
        "status start stop",
        "small medium large",
        "atlas alpha",
        "nvidia-l4",
        "web-preview",
        "profiles",
    ]


def test_zsh_completion_is_valid_zsh(tmp_path: Path) -> None:
    zsh, script = completion_in(tmp_path, "zsh")
    subprocess.run([zsh, "-n", str(script)], check=True)


@pytest.mark.parametrize(
    "load", ['source "$script"', 'source <(cat "$script")', 'eval "$(cat "$script")"']
)
def test_zsh_completion_registers_when_sourced_or_evaluated(tmp_path: Path, load: str) -> None:
    zsh, script = completion_in(tmp_path, "zsh")
    probe = (
        f"script={script}; autoload -Uz compinit && compinit -u -d {tmp_path}/zcompdump\n"
        f"{load}\n"
        'print -r -- "${_comps[devbox]}"\n'
    )
    result = subprocess.run([zsh, "-f", "-c", probe], text=True, capture_output=True, check=True)
    assert result.stdout.strip() == "_shtab_devbox", result.stderr


def test_profiles_table_says_beside_free_when_a_device_comes_free() -> None:
    found = models.GpuWhen.model_validate(
        {
            "observed_at": "2026-12-02T09:00:00Z",
            "profiles": [
                {"name": "nvidia-l4", "free_at": "2026-12-02T11:00:00Z", "bound": True,
                 "basis": "By 11:00."},
                {"name": "mig-1g", "free_at": "2026-12-02T09:30:00Z", "bound": False,
                 "basis": "About 09:30."},
            ],
        }
    )  # fmt: skip
    lines = render.profiles_table(make_catalog(), None, found).splitlines()
    assert "WAITING  NEXT FREE  DESCRIPTION" in lines[0]
    assert lines[1].split("nvidia.com/gpu")[1].split()[2:4] == ["within", "2h"]
    assert lines[2].split("nvidia.com/mig-1g.10gb")[1].split()[2:4] == ["about", "30m"]
    now = found.model_copy(update={"profiles": [found.profiles[0].model_copy(
        update={"free_at": found.observed_at})]})  # fmt: skip
    assert render.next_free_text(now, "nvidia-l4") == "now"
    assert render.next_free_text(now, "mig-1g") == "?"
