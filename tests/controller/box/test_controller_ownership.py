"""A box's owner, as rendered and read back, and people's SSH keys, from plain data."""

from __future__ import annotations

import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from box_specs import atlas_spec
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from devboxes_controller.box import authorized_keys, ownership, render, status, template
from devboxes_controller.box.spec import BoxSpec, spec_from_deployment
from devboxes_controller.config.settings import Settings, settings_from_mapping

EXPIRES = datetime(2030, 5, 17, 9, 30, 0, tzinfo=UTC)
SETTINGS = settings_from_mapping(
    {
        "namespace": "boxes",
        "gpu": {
            "enabled": True,
            "defaultProfile": "l4",
            "profiles": [
                {
                    "name": "l4",
                    "displayName": "NVIDIA L4",
                    "resourceName": "nvidia.com/gpu",
                    "count": 1,
                }
            ],
        },
    }
)


def spec(owner: str | None, gpu: bool = True) -> BoxSpec:
    return atlas_spec(EXPIRES, SETTINGS.gpu.profile("l4") if gpu else None, owner=owner)


def objects(owner: str | None, settings: Settings = SETTINGS) -> list[dict[str, Any]]:
    box = spec(owner)
    deployment = render.render_deployment(box, settings)
    return [
        deployment,
        {"metadata": deployment["spec"]["template"]["metadata"]},
        render.render_pvc(box, settings),
        render.render_service(box, settings),
    ]


@pytest.mark.parametrize(
    "user",
    ["alice", "Alice.Smith", "alice@example.com", "ünïcode name", "-x-", "a" * 63, "a" * 200],
)
def test_every_object_of_a_persons_box_carries_the_exact_name_and_a_valid_label(
    user: str,
) -> None:
    label = ownership.owner_label(user)
    assert re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?", label)
    for obj in objects(user):
        assert obj["metadata"]["labels"][ownership.LABEL_OWNER] == label
        assert obj["metadata"]["annotations"][ownership.ANNOTATION_OWNER] == user
        assert ownership.owner_of(obj) == user


def test_two_names_never_share_a_label() -> None:
    names = ["alice@example.com", "alice-example.com", "alice@example.org", "Alice@example.com"]
    assert len({ownership.owner_label(n) for n in names}) == len(names)


def test_the_operators_boxes_render_as_before_and_belong_to_the_operator() -> None:
    for obj in objects(None):
        assert ownership.LABEL_OWNER not in obj["metadata"]["labels"]
        assert ownership.ANNOTATION_OWNER not in (obj["metadata"].get("annotations") or {})
        assert ownership.owner_of(obj) == ownership.OPERATOR
    # "operator" as an owner is the operator: nothing is written for it either.
    assert objects(ownership.OPERATOR)[0] == objects(None)[0]


def test_the_owner_is_pinned_so_a_persons_box_never_drifts_from_its_release() -> None:
    deployment = render.render_deployment(spec("alice@example.com"), SETTINGS)
    read_back = spec_from_deployment(deployment)
    assert read_back.owner == "alice@example.com"
    assert template.changes(deployment, SETTINGS) == []
    assert (
        render.render_deployment(read_back, SETTINGS)["spec"]["template"]
        == (deployment["spec"]["template"])
    )


def test_the_api_reports_the_owner() -> None:
    deployment = render.render_deployment(spec("bob"), SETTINGS)
    deployment["metadata"]["creationTimestamp"] = "2030-05-17T05:30:00Z"
    box = status.derive(status.BoxObjects(deployment=deployment), SETTINGS, EXPIRES)
    assert box.owner == "bob"
    operator = render.render_deployment(spec(None), SETTINGS)
    operator["metadata"]["creationTimestamp"] = "2030-05-17T05:30:00Z"
    assert status.derive(status.BoxObjects(deployment=operator), SETTINGS, EXPIRES).owner == (
        "operator"
    )


def test_only_a_persons_boxes_mount_that_persons_keys() -> None:
    def pod(owner: str | None) -> dict[str, Any]:
        spec_ = render.render_deployment(spec(owner), SETTINGS)["spec"]["template"]["spec"]
        return dict(spec_)

    alice = pod("alice")
    (volume,) = [v for v in alice["volumes"] if v["name"] == authorized_keys.VOLUME]
    assert volume["configMap"]["name"] == authorized_keys.config_map_name("alice")
    assert volume["configMap"]["optional"] is True
    main = alice["containers"][0]
    assert {
        "name": authorized_keys.VOLUME,
        "mountPath": authorized_keys.MOUNT_PATH,
        "readOnly": True,
    } in main["volumeMounts"]
    assert all(
        m["name"] != authorized_keys.VOLUME
        for c in alice["containers"][1:]
        for m in c["volumeMounts"]
    )
    assert authorized_keys.config_map_name("alice") != authorized_keys.config_map_name("bob")
    assert all(v["name"] != authorized_keys.VOLUME for v in pod(None)["volumes"])


def _openssh(key: Any, comment: str = "me@laptop") -> str:
    text = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return f"{text.decode()} {comment}"


@pytest.mark.parametrize(
    "private",
    [
        ed25519.Ed25519PrivateKey.generate(),
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP384R1()),
        rsa.generate_private_key(public_exponent=65537, key_size=3072),
    ],
    ids=["ed25519", "p256", "p384", "rsa3072"],
)
def test_a_public_key_has_the_fingerprint_ssh_keygen_gives(private: Any, tmp_path: Path) -> None:
    line = _openssh(private.public_key())
    parsed = authorized_keys.parse(f"  {line}\n")
    assert parsed.line == line
    assert parsed.comment == "me@laptop"
    pub = tmp_path / "key.pub"
    pub.write_text(line + "\n")
    shown = subprocess.run(
        ["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True
    ).stdout
    assert shown.split()[1] == parsed.fingerprint


ED25519 = _openssh(ed25519.Ed25519PrivateKey.generate().public_key(), "")
# A weak key on purpose: the parser must refuse it.
WEAK_BITS = 1024
SHORT_RSA = _openssh(
    rsa.generate_private_key(public_exponent=65537, key_size=WEAK_BITS).public_key()
)
PRIVATE = (
    ed25519.Ed25519PrivateKey.generate()
    .private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    .decode()
)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "empty"),
        (PRIVATE, "private key"),
        (f'command="rm -rf /" {ED25519}', "options"),
        ("ssh-dss AAAAB3NzaC1kc3M", "unsupported key type"),
        ("ssh-ed25519", "no key data"),
        ("ssh-ed25519 not-base64!", "not valid base64"),
        ("ssh-ed25519 AAAAC3NzaC1yc2E=", "not a valid ssh-ed25519"),
        (SHORT_RSA, "1024 bits"),
        (f"{ED25519}\n{ED25519}", "more than one line"),
        (f"{ED25519} {'x' * 300}", "comment"),
        (f"{ED25519} bell\x07", "comment"),
        ("x" * 5000, "at most 4096"),
    ],
    ids=lambda value: value if len(value) < 30 and "\n" not in value else "generated",
)
def test_what_is_not_one_public_key_is_refused_with_the_reason(text: str, words: str) -> None:
    with pytest.raises(authorized_keys.KeyRejected, match=re.escape(words)):
        authorized_keys.parse(text)


def test_the_keys_config_map_reads_back_what_was_written_and_skips_edited_lines() -> None:
    entries = [authorized_keys.Entry(ED25519.strip(), "2030-05-17T09:30:00Z")]
    config_map = authorized_keys.render_config_map("alice@example.com", entries, "boxes", {})
    assert config_map["data"][authorized_keys.AUTHORIZED_KEYS] == ED25519.strip() + "\n"
    assert authorized_keys.entries_of(config_map) == entries
    config_map["data"][authorized_keys.RECORD] = (
        '[{"key": "ssh-ed25519 broken", "addedAt": "x"}, 3]'
    )
    assert authorized_keys.entries_of(config_map) == []
    config_map["data"][authorized_keys.RECORD] = "{not json"
    assert authorized_keys.entries_of(config_map) == []


def test_the_operators_keys_open_the_operators_boxes_only() -> None:
    with_keys = SETTINGS.model_copy(
        update={"ssh": SETTINGS.ssh.model_copy(update={"authorized_keys_secret": "ops-keys"})}
    )

    def secrets(owner: str | None) -> list[str]:
        pod = render.render_deployment(spec(owner), with_keys)["spec"]["template"]["spec"]
        return [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v]

    assert "ops-keys" in secrets(None)
    assert "ops-keys" not in secrets("alice")
