"""A box reads the same in Python, in the Lab's sidebar and on the dashboard.

The TypeScript words have one source, ``jupyter_ext/src/words.ts``: the Lab imports it
and the dashboard's ``static/labels.js`` is generated from it (``make labels``). Here the
same plain boxes, profiles and free counts go through the Python functions, the Lab's
TypeScript (transpiled by the repository's own compiler) and the dashboard's file (both
run by node), and every string must agree. The controller's Kubernetes Event names the
accelerator in the Python words.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from devboxes_controller.box.spec import BoxSpec
from devboxes_controller.config.gpu import GpuProfileConfig
from devboxes_controller.control.lifecycle import _created_message
from devboxes_jupyter import labels as jupyter_labels

from devboxes_sdk import labels, models

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = ROOT / "jupyter_ext"
DASHBOARD_LABELS = ROOT / "controller" / "devboxes_controller" / "web" / "static" / "labels.js"
TYPESCRIPT = EXTENSION / "node_modules" / "typescript"

needs_node = pytest.mark.skipif(
    shutil.which("node") is None or not TYPESCRIPT.exists(),
    reason="node and the npm packages are needed: `make node-deps` installs them",
)

NOW = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
L4 = {"profile": "nvidia-l4", "display_name": "NVIDIA L4", "resource_name": "nvidia.com/gpu"}
MIG = {
    "profile": "a100-mig",
    "display_name": "A100 MIG 1g.10gb",
    "resource_name": "nvidia.com/mig-1g.10gb",
}
# (state, expires_at, gpu): every branch of the auto-stop and accelerator words.
BOXES: list[tuple[str, str | None, dict[str, Any] | None]] = [
    ("ready", "2026-12-02T11:20:00Z", dict(L4, count=1)),
    ("ready", "2026-12-02T08:00:30Z", None),
    ("starting", "2026-12-02T09:00:00Z", dict(MIG, count=2)),
    ("ready", "2026-12-04T10:00:00Z", None),
    ("ready", "2026-12-05T08:00:00Z", None),
    ("ready", "2026-12-02T08:45:00Z", None),
    ("ready", "2026-12-02T07:00:00Z", None),
    ("ready", None, None),
    ("stopped", "2026-12-02T09:00:00Z", None),
]
# Stops the controller warned of: a time to live's end, and an idle stop before it.
WARNINGS = [("ttl", "2026-12-02T08:09:00Z"), ("idle", "2026-12-02T08:04:30Z")]
PROFILES = [
    {"name": "nvidia-l4", "display_name": "NVIDIA L4", "description": None,
     "resource_name": "nvidia.com/gpu", "count": 1, "default": True},
    {"name": "a100-mig", "display_name": "A100 MIG 1g.10gb", "description": "A slice",
     "resource_name": "nvidia.com/mig-1g.10gb", "count": 2, "default": False},
]  # fmt: skip
IMAGES = [
    {"name": "cuda", "display_name": "CUDA 12.8 workspace", "description": None,
     "mode": "workspace", "ports": []},
    {"name": "web-preview", "display_name": "Web preview", "description": "Port 8080",
     "mode": "sidecar", "ports": [{"name": "http", "container_port": 8080, "protocol": "TCP"}]},
]  # fmt: skip
# The environment pinned to a box: none (the operator's workspace image), or a profile's.
BOX_IMAGES: list[dict[str, Any] | None] = [
    None,
    {"profile": "web-preview", "display_name": "Web preview", "mode": "sidecar", "ports": []},
]
FREE = [
    {"name": "nvidia-l4", "available": 1, "capacity": 2, "waiting": 0},
    {"name": "nvidia-l4", "available": 0, "capacity": 2, "waiting": 3},
    {"name": "a100-mig", "available": None, "capacity": None, "waiting": 0, "reason": "x"},
]

# The devices a DRA box got: an alternative with its memory, one without a product or
# memory, the profile's own device, and none yet.
ALLOCATED: list[list[dict[str, Any]] | None] = [
    [{"product": "NVIDIA A100-SXM4-40GB", "memory": "40Gi", "alternative": 1},
     {"product": None, "memory": None, "alternative": 0}],
    [{"product": "NVIDIA H100 80GB HBM3", "memory": "80Gi", "alternative": 0}],
    [{"product": "AMD Instinct MI210", "memory": None, "alternative": 2}],
    None,
]  # fmt: skip

# A ready DRA box whose profile's first choice was taken, for the sidebar's detail lines.
DRA_BOX = {
    "name": "h100-or-a100", "state": "ready", "preset": "small",
    "created_at": "2026-12-01T08:00:00Z", "expires_at": None,
    "gpu": {"profile": "h100-or-a100", "display_name": "NVIDIA H100 or A100", "kind": "dra",
            "resource_name": "gpu.nvidia.com", "devices": "NVIDIA H100 80GB, else A100 40GB",
            "count": 1, "allocated": ALLOCATED[0]},
}  # fmt: skip

# (summary, message): the one line a box gives for why it is not ready.
REASONS = [
    {"summary": "Waiting for a free NVIDIA L4: 0 of 2 free, 2nd in line (estimate)",
     "message": "Scheduling blocked: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."},
    {"summary": None, "message": "Waiting for the SSH server to become ready."},
    {"summary": None, "message": None},
]  # fmt: skip
# When a new box of a profile would get a device: every branch of NEXT FREE.
WHENS: list[dict[str, Any] | None] = [
    None,
    {"name": "nvidia-l4", "free_at": None, "basis": "Unknown."},
    {"name": "nvidia-l4", "free_at": "2026-12-02T08:00:00Z", "bound": True, "basis": "Now."},
    {"name": "nvidia-l4", "free_at": "2026-12-02T10:30:00Z", "bound": True, "basis": "By."},
    {"name": "nvidia-l4", "free_at": "2026-12-02T08:12:40Z", "bound": False, "basis": "About."},
    {"name": "nvidia-l4", "free_at": "2026-12-05T09:00:00Z", "bound": False, "basis": "About."},
]  # fmt: skip
# (step, total) seconds of a start on its way: the first step, and a later one.
ELAPSED = [(0.4, 0.4), (3.9, 3.9), (2.5, 9.7), (61.0, 125.2)]
# When a list that is no longer refreshed was last read.
OBSERVED = [None, *(NOW - timedelta(seconds=s) for s in (30, 11 * 60 + 5, 3 * 3600 + 60))]

# Renders the cases through the Lab's labels.ts and words.ts (transpiled to CommonJS,
# where extensionless imports resolve as the Lab's bundler resolves them) and through the
# dashboard's ES module.
HARNESS = r"""
const fs = require('fs');
const path = require('path');
const input = JSON.parse(fs.readFileSync(0, 'utf8'));
const ts = require(input.typescript);
for (const name of ['words', 'labels']) {
  const source = fs.readFileSync(path.join(input.src, `${name}.ts`), 'utf8');
  const options = { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2019 };
  const { outputText } = ts.transpileModule(source, { compilerOptions: options });
  fs.writeFileSync(path.join(input.out, `${name}.js`), outputText);
}
const words = require(path.join(input.out, 'words.js'));
const lab = require(path.join(input.out, 'labels.js'));
const now = Date.parse(input.now);
function render(w) {
  return {
    cpu_only: w.CPU_ONLY,
    allocations: input.boxes.map(box => w.allocationLabel(box.gpu)),
    auto_stop: input.boxes.map(box => w.autoStopLabel(box, now)),
    allocated: input.allocated.map(devices => w.allocatedLabel(devices)),
    units: input.profiles.map(profile => w.unitsLabel(profile)),
    free: input.free.map(entry => w.freeText(entry)),
    next_free: input.whens.map(entry => w.nextFreeLabel(entry, input.now)),
    reasons: input.reasons.map(box => w.reason(box)),
    stale: input.observed.map(at => w.staleNotice(at, now)),
    elapsed: input.elapsed.map(([step, total]) => w.elapsedLabel(step, total)),
    default_environment: w.DEFAULT_ENVIRONMENT,
    environment_choices: input.images.map(profile => w.environmentChoiceLabel(profile)),
    environments: input.box_images.map(image => w.environmentLabel(image)),
  };
}
const dashboardSource = fs.readFileSync(input.dashboard, 'utf8');
import('data:text/javascript,' + encodeURIComponent(dashboardSource)).then(dashboard => {
  console.log(JSON.stringify({
    lab: {
      ...render({ ...words, ...lab }),
      profiles: input.profiles.map(profile => lab.profileLabel(profile, null)),
      notes: [lab.GPU_DISABLED_NOTE, lab.CPU_NOTE],
      dra_detail: lab.detail(input.dra_box),
    },
    dashboard: render(dashboard),
  }));
});
"""


def _boxes() -> list[dict[str, Any]]:
    return [
        {
            "name": f"box-{index}",
            "state": state,
            "preset": "small",
            "created_at": "2026-12-01T08:00:00Z",
            "expires_at": expires_at,
            "gpu": gpu,
        }
        for index, (state, expires_at, gpu) in enumerate(BOXES)
    ] + [
        {
            "name": f"warned-{index}",
            "state": "ready",
            "preset": "small",
            "created_at": "2026-12-01T08:00:00Z",
            "expires_at": "2026-12-02T20:00:00Z",
            "gpu": None,
            "stop_warning": {"reason": reason, "stops_at": at, "message": "Stops soon."},
        }
        for index, (reason, at) in enumerate(WARNINGS)
    ]


def _python() -> dict[str, Any]:
    boxes = [models.Devbox.model_validate(box) for box in _boxes()]
    profiles = [models.GpuProfile.model_validate(profile) for profile in PROFILES]
    return {
        "cpu_only": labels.CPU_ONLY,
        "allocations": [labels.accelerator_label(box.gpu) for box in boxes],
        "auto_stop": [
            labels.auto_stop_label(box.state, box.expires_at, NOW, box.stop_warning)
            for box in boxes
        ],
        "units": [labels.accelerator_label(profile) for profile in profiles],
        "allocated": [
            labels.allocated_label(
                models.AllocatedDevice.model_validate(device) for device in devices or []
            )
            for devices in ALLOCATED
        ],
        "profiles": [jupyter_labels.profile_label(profile) for profile in profiles],
        "notes": [jupyter_labels.GPU_DISABLED_NOTE, jupyter_labels.CPU_NOTE],
        # An empty reason is no text at all in TypeScript.
        "reasons": [labels.reason(r["summary"], r["message"]) or "" for r in REASONS],
        "stale": [labels.stale_notice(at, NOW) for at in OBSERVED],
        "next_free": [
            labels.next_free_label(
                None if entry is None else models.ProfileWhen.model_validate(entry), NOW
            )
            for entry in WHENS
        ],
        "elapsed": [labels.elapsed_label(step, total) for step, total in ELAPSED],
        "default_environment": labels.DEFAULT_ENVIRONMENT,
        "environment_choices": [
            labels.environment_choice_label(models.ImageProfile.model_validate(profile))
            for profile in IMAGES
        ],
        "environments": [
            labels.environment_label(
                None if image is None else models.ImageAllocation.model_validate(image)
            )
            for image in BOX_IMAGES
        ],
    }


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("lab-words")
    # No "type": "module" above the transpiled files, whatever the temp dir's parents say.
    (out / "package.json").write_text('{"type": "commonjs"}\n')
    request = {
        "typescript": str(TYPESCRIPT),
        "src": str(EXTENSION / "src"),
        "out": str(out),
        "dashboard": str(DASHBOARD_LABELS),
        "now": NOW.isoformat(),
        "boxes": _boxes(),
        "profiles": PROFILES,
        "free": FREE,
        "allocated": ALLOCATED,
        "dra_box": DRA_BOX,
        "reasons": REASONS,
        "images": IMAGES,
        "box_images": BOX_IMAGES,
        "observed": [None if at is None else at.isoformat() for at in OBSERVED],
        "elapsed": ELAPSED,
        "whens": WHENS,
    }
    result = subprocess.run(
        ["node", "-e", HARNESS],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


@needs_node
@pytest.mark.parametrize(
    "key",
    [
        "cpu_only",
        "allocations",
        "auto_stop",
        "units",
        "allocated",
        "reasons",
        "stale",
        "elapsed",
        "next_free",
        "default_environment",
        "environment_choices",
        "environments",
    ],
)
def test_python_the_lab_and_the_dashboard_say_the_same(rendered: dict[str, Any], key: str) -> None:
    python = _python()[key]
    assert rendered["lab"][key] == python
    assert rendered["dashboard"][key] == python


@needs_node
def test_next_free_says_now_a_bound_or_an_estimate(rendered: dict[str, Any]) -> None:
    assert rendered["dashboard"]["next_free"] == [
        "?",
        "?",
        "now",
        "within 2h",
        "about 12m",
        "about 3d",
    ]


@needs_node
def test_a_start_counts_its_step_and_its_whole_wait(rendered: dict[str, Any]) -> None:
    assert rendered["lab"]["elapsed"] == [
        "(0 s)",
        "(3 s)",
        "(2 s; 9 s in all)",
        "(61 s; 125 s in all)",
    ]


@needs_node
def test_the_lab_and_the_dashboard_count_free_devices_alike(rendered: dict[str, Any]) -> None:
    assert (
        rendered["lab"]["free"]
        == rendered["dashboard"]["free"]
        == [
            " \N{EM DASH} 1 of 2 free",
            " \N{EM DASH} 0 of 2 free, 3 waiting",
            " \N{EM DASH} free count unknown",
        ]
    )


@needs_node
@pytest.mark.parametrize("key", ["profiles", "notes"])
def test_the_lab_and_the_python_widgets_say_the_same(rendered: dict[str, Any], key: str) -> None:
    assert rendered["lab"][key] == _python()[key]


def test_an_environment_says_whether_it_replaces_the_workspace_or_runs_beside_it() -> None:
    assert _python()["environment_choices"] == [
        "CUDA 12.8 workspace (as the workspace)",
        "Web preview (beside the workspace)",
    ]
    assert _python()["environments"] == ["Default workspace", "Web preview"]


def test_a_dra_box_names_the_devices_it_got_and_which_alternative() -> None:
    assert _python()["allocated"] == [
        "NVIDIA A100-SXM4-40GB (40Gi, alternative 1), unnamed device",
        "NVIDIA H100 80GB HBM3 (80Gi)",
        "AMD Instinct MI210 (alternative 2)",
        "",
    ]


@needs_node
def test_the_sidebar_details_of_a_dra_box_follow_its_accelerator_with_what_it_got(
    rendered: dict[str, Any],
) -> None:
    lines = rendered["lab"]["dra_detail"]
    accelerator = lines.index(
        "accelerator: NVIDIA H100 or A100 \N{MIDDLE DOT} NVIDIA H100 80GB, else A100 40GB"
    )
    assert lines[accelerator + 1] == f"allocated: {_python()['allocated'][0]}"


def test_the_auto_stop_words_cover_every_branch() -> None:
    assert _python()["auto_stop"] == [
        "in 3 h 20 min",
        "in 1 min",
        "in 1 h",
        "in 2 d 2 h",
        "in 3 d",
        "in 45 min",
        "due now",
        "never",
        "stopped",
        "in 9 min (time to live)",
        "in 4 min (idle)",
    ]


@pytest.mark.parametrize("gpu", [None, "nvidia-l4"])
def test_the_created_event_names_the_accelerator_in_the_same_words(gpu: str | None) -> None:
    profile = GpuProfileConfig.model_validate(
        {"name": "nvidia-l4", "displayName": "NVIDIA L4", "resourceName": "nvidia.com/gpu",
         "count": 1}
    )  # fmt: skip
    spec = BoxSpec(
        name="atlas",
        preset="small",
        ttl_hours=1,
        repository=None,
        expires_at=NOW,
        gpu=profile if gpu else None,
    )
    words = labels.accelerator_label(profile.to_wire(False)) if gpu else labels.CPU_ONLY
    assert words in _created_message(spec, reused=False)
