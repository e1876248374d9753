"""The OCI archives the testbed and `make images` write: layers as given, a config that
names them, and an index that names the image."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

from devboxes_testbed import images


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {
            m.name: extracted.read()
            for m in tar.getmembers()
            if m.isfile() and (extracted := tar.extractfile(m)) is not None
        }


def layer(tmp_path: Path) -> Path:
    path = tmp_path / "layer.tar"
    program = tmp_path / "hello"
    program.write_text("#!/bin/sh\necho hello\n")
    with tarfile.open(path, "w") as tar:
        tar.add(program, arcname="usr/local/bin/hello")
    return path


def test_an_archive_holds_its_layer_config_and_name(tmp_path: Path) -> None:
    archive = tmp_path / "image.tar"
    given = layer(tmp_path)
    images.write_archive(archive, "devboxes.local/hello:abc", [given], {"Cmd": ["hello"]})
    files = members(archive)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "devboxes.local/hello:abc"
    manifest = json.loads(files[f"blobs/sha256/{entry['digest'].split(':')[1]}"])
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"])
    assert config["config"] == {"Cmd": ["hello"]}
    (blob,) = manifest["layers"]
    data = files[f"blobs/sha256/{blob['digest'].split(':')[1]}"]
    # Every blob is stored under its own digest, and the layer's is its diff id too.
    for name, content in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(content).hexdigest() == name.rsplit("/", 1)[1]
    assert config["rootfs"]["diff_ids"] == [blob["digest"]]
    assert data == given.read_bytes()


def test_an_export_renames_the_image_and_keeps_every_blob(tmp_path: Path) -> None:
    archive = tmp_path / "image.tar"
    images.write_archive(archive, "devboxes.local/hello:abc", [layer(tmp_path)], {})
    out = tmp_path / "export.tar"
    images.export(
        images.Image(archive, "devboxes.local/hello:abc", ()), "devboxes/hello:1.2.3", out
    )
    before, after = members(archive), members(out)
    assert {k: v for k, v in before.items() if k != "index.json"} == {
        k: v for k, v in after.items() if k != "index.json"
    }
    (entry,) = json.loads(after["index.json"])["manifests"]
    assert entry["annotations"] == {
        "io.containerd.image.name": "devboxes/hello:1.2.3",
        "org.opencontainers.image.ref.name": "1.2.3",
    }
