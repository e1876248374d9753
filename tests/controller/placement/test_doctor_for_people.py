"""The doctor as a person who is not an admin reads it: every verdict, none of the cluster's
placement details. Plain data, no cluster."""

from __future__ import annotations

from typing import Any

from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.placement import capacity, doctor, doctor_facts
from dra_profiles import MI300X

from devboxes_sdk._render import doctor_text
from devboxes_sdk.models import DoctorCheck, DoctorReport

SELECTOR_VALUE = "pool-l4-private"
HIDDEN_POOL = "pool-nowhere"
RUNTIME_CLASS = "runtime-gpu-private"
TAINT_KEY = "dedicated.example.org/gpu"
NODE_NAMES = ("node-alpha-private", "node-beta-private")
SECRET = "keys-secret-private"
QUOTA = "quota-private"
LIMIT_RANGE = "limits-private"
STORAGE_CLASS = "storage-private"
SERVICE_ACCOUNT = "system:serviceaccount:devboxes:controller-private"
CEL = "device.attributes['gpu.amd.com'].private"
# Everything above, and the DeviceClass of the DRA profile.
DETAILS = (
    SELECTOR_VALUE,
    HIDDEN_POOL,
    RUNTIME_CLASS,
    TAINT_KEY,
    *NODE_NAMES,
    SECRET,
    QUOTA,
    LIMIT_RANGE,
    STORAGE_CLASS,
    SERVICE_ACCOUNT,
    CEL,
    MI300X["deviceClassName"],
)
SETTINGS = settings_from_mapping(
    {
        "storageClassName": STORAGE_CLASS,
        "ssh": {"authorizedKeysSecret": SECRET, "host": "gpu.example.org"},
        "limits": {"perPerson": {"boxes": 2}},
        "gpu": {
            "enabled": True,
            "defaultProfile": "l4",
            "profiles": [
                {
                    "name": "l4",
                    "displayName": "L4",
                    "resourceName": "nvidia.com/gpu",
                    "count": 1,
                    "nodeSelector": {"accelerator": SELECTOR_VALUE},
                    "runtimeClassName": RUNTIME_CLASS,
                },
                {
                    "name": "nowhere",
                    "displayName": "Nowhere",
                    "resourceName": "nvidia.com/gpu",
                    "count": 1,
                    "nodeSelector": {"accelerator": HIDDEN_POOL},
                },
                MI300X,
            ],
        },
        "images": {
            "enabled": True,
            "profiles": [
                {
                    "name": "preloaded",
                    "displayName": "Preloaded",
                    "image": "registry.example.org/private/web:1.2",
                    "mode": "workspace",
                    "accelerators": ["cpu"],
                    "pullPolicy": "Never",
                }
            ],
        },
    }
)


def _node(name: str, ready: bool) -> dict[str, Any]:
    return capacity.strip_node(
        {
            "metadata": {
                "name": name,
                "resourceVersion": "1",
                "labels": {"accelerator": SELECTOR_VALUE},
            },
            "spec": {"taints": [{"key": TAINT_KEY, "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {
                    "cpu": "16",
                    "memory": "64Gi",
                    "pods": "110",
                    "nvidia.com/gpu": "1",
                },
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
    )


FACTS = doctor_facts.Facts(
    nodes=[_node(NODE_NAMES[0], ready=False), _node(NODE_NAMES[1], ready=False)],
    runtime_classes=[],
    storage_classes=[{"metadata": {"name": "standard"}}],
    quotas=[{"metadata": {"name": QUOTA}, "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}}],
    limit_ranges=[
        {
            "metadata": {"name": LIMIT_RANGE},
            "spec": {"limits": [{"type": "Container", "max": {"memory": "1Gi"}}]},
        }
    ],
    device_classes=[],
    slices=None,
    claim_refusals={MI300X["name"]: f"spec.devices: Invalid value: {CEL}"},
    denied=[p for p in doctor_facts.PERMISSIONS if p.resource == "deployments"],
    unreadable={"ResourceSlices": f'User "{SERVICE_ACCOUNT}" cannot list resourceslices'},
)


def test_a_person_gets_every_verdict_and_none_of_the_details() -> None:
    full = doctor.diagnose(SETTINGS, FACTS)
    shown = doctor.for_people(full)
    # The admin's report names every detail, so their absence below means something.
    assert [d for d in DETAILS if d not in full.model_dump_json()] == []
    assert [d for d in DETAILS if d in shown.model_dump_json()] == []
    assert shown.ok == full.ok is False
    assert [(c.profile, c.check, c.verdict) for c in shown.checks] == [
        (c.profile, c.check, c.verdict) for c in full.checks
    ]
    assert {c.verdict for c in full.checks} == {"pass", "warn", "fail"}


def test_each_check_is_told_in_words_of_its_own_or_left_as_it_is() -> None:
    full = doctor.diagnose(SETTINGS, FACTS)
    shown = {(c.profile, c.check, c.message): c for c in doctor.for_people(full).checks}
    assert {c.check for c in full.checks} - doctor.PUBLIC_CHECKS - set(doctor.TOPICS) == set()
    for check in full.checks:
        if check.check in doctor.PUBLIC_CHECKS:
            assert (check.profile, check.check, check.message) in shown
            continue
        told = f"{doctor.TOPICS[check.check]}: {doctor.OUTCOMES[check.verdict]}"
        person = shown[check.profile, check.check, told]
        assert person.fix == (None if check.verdict == "pass" else doctor.ASK_AN_ADMIN)


def test_the_limits_and_the_image_profiles_stay_as_they_are() -> None:
    full = doctor.diagnose(SETTINGS, FACTS)
    shown = doctor.for_people(full)
    kept = [c for c in full.checks if c.check in ("limits", "image-pull-policy")]
    assert len(kept) == 2
    assert all(c in shown.checks for c in kept)


def test_a_check_without_words_of_its_own_is_told_by_its_name() -> None:
    report = DoctorReport(
        ok=True,
        checks=[
            DoctorCheck(profile="l4", check="new-check", verdict="warn", message=SECRET, fix=SECRET)
        ],
    )
    assert doctor.for_people(report).checks == [
        DoctorCheck(
            profile="l4",
            check="new-check",
            verdict="warn",
            message="the new-check check: needs attention",
            fix=doctor.ASK_AN_ADMIN,
        )
    ]


def test_the_cli_prints_a_persons_report_one_line_per_check() -> None:
    report = doctor.for_people(doctor.diagnose(SETTINGS, FACTS))
    lines = doctor_text(report).splitlines()
    assert len(lines) == 1 + len(report.checks) + 2
    row = next(line for line in lines if " runtime-class " in line)
    assert row.split()[:2] == ["FAIL", "l4"]
    assert row.endswith(
        "the container runtime of this profile's boxes: not in order: ask an admin, whose "
        "devbox gpu doctor shows what is wrong and how to fix it"
    )
    passed = next(line for line in lines if " ssh-host " in line)
    assert passed.endswith("the address that SSH commands show: in order")
