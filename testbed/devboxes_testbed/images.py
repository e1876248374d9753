"""Container images for the real node, built here from Debian packages and the project's files.

No registry is reachable, so every image is written as an OCI image archive that the node's
containerd imports. An archive is cached by a hash of everything it is made from, so it is
built again only when one of those inputs changes.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from . import build
from .errors import TestbedError

WORKSPACE_DIR = Path(__file__).resolve().parent.parent.parent / "workspace"
# The files of workspace/ that go into the image, and where.
WORKSPACE_FILES = {
    "sshd_config": "/etc/ssh/sshd_config.d/00-devbox.conf",
    "devbox-entrypoint": "/usr/local/bin/devbox-entrypoint",
    "devbox-gpu-check": "/usr/local/bin/devbox-gpu-check",
    "devbox-gpu-sampler": "/usr/local/bin/devbox-gpu-sampler",
    "devbox-activity-agent": "/usr/local/bin/devbox-activity-agent",
}
SUITE = "bookworm"
MIRRORS = (
    f"deb http://deb.debian.org/debian {SUITE} main",
    f"deb http://deb.debian.org/debian {SUITE}-updates main",
    f"deb http://deb.debian.org/debian-security {SUITE}-security main",
)
# Bump when the way an image is put together changes, so cached archives are rebuilt.
LAYOUT_VERSION = "1"

LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"


@dataclass(frozen=True)
class Image:
    """An OCI archive, the name it carries, and the references pods use for it."""

    archive: Path
    name: str
    references: tuple[str, ...]


def images_dir() -> Path:
    directory = build.cache_root() / "images"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for chunk in iter(lambda: source.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def write_archive(out: Path, name: str, layers: Iterable[Path], config: dict[str, object]) -> None:
    """Write an OCI image archive named ``name`` (a full reference) of uncompressed layers
    (each a tar file) and a run config."""
    layer_list = list(layers)
    digests = [_sha256_file(layer) for layer in layer_list]
    image_config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d in digests]},
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {
                "mediaType": CONFIG,
                "digest": f"sha256:{hashlib.sha256(image_config).hexdigest()}",
                "size": len(image_config),
            },
            "layers": [
                {"mediaType": LAYER_TAR, "digest": f"sha256:{d}", "size": layer.stat().st_size}
                for d, layer in zip(digests, layer_list, strict=True)
            ],
        },
        sort_keys=True,
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": MANIFEST,
                    "digest": f"sha256:{hashlib.sha256(manifest).hexdigest()}",
                    "size": len(manifest),
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                    },
                }
            ],
        }
    ).encode()
    partial = out.with_name(f".{out.name}.partial")
    with tarfile.open(partial, "w") as tar:
        _add_bytes(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add_bytes(tar, "index.json", index)
        for data in (image_config, manifest):
            _add_bytes(tar, f"blobs/sha256/{hashlib.sha256(data).hexdigest()}", data)
        for digest, layer in zip(digests, layer_list, strict=True):
            tar.add(layer, arcname=f"blobs/sha256/{digest}", recursive=False)
    partial.rename(out)


def _cached(name: str, key: str, make: Callable[[Path, str], None]) -> Image:
    """The archive for ``key``, made by ``make`` unless present; older archives of ``name`` go."""
    directory = images_dir()
    archive = directory / f"{name}-{key}.tar"
    reference = f"devboxes.local/{name}:{key}"
    with (directory / f".{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not archive.is_file():
            for stale in directory.glob(f"{name}-*.tar"):
                stale.unlink()
            make(archive, reference)
    return Image(archive, reference, (reference,))


def pause_image(bin_dir: Path) -> Image:
    """The pod sandbox image: the testbed's own pause program and nothing else."""
    binary = bin_dir / "pause"
    key = hashlib.sha256(LAYOUT_VERSION.encode() + binary.read_bytes()).hexdigest()[:12]

    def make(archive: Path, name: str) -> None:
        layer = archive.with_suffix(".layer")
        with tarfile.open(layer, "w") as tar:
            info = tar.gettarinfo(binary, arcname="pause")
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            with binary.open("rb") as source:
                tar.addfile(info, source)
        write_archive(archive, name, [layer], {"Entrypoint": ["/pause"]})
        layer.unlink()

    return _cached("pause", key, make)


def workspace_inputs() -> list[Path]:
    names = ["packages", "devbox-image-setup", *WORKSPACE_FILES]
    return [WORKSPACE_DIR / name for name in names]


def workspace_key() -> str:
    digest = hashlib.sha256(f"{LAYOUT_VERSION} {SUITE} {MIRRORS}".encode())
    for path in workspace_inputs():
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def workspace_image(references: tuple[str, ...], log: Callable[[str], None] = print) -> Image:
    """The workspace image from Debian packages and workspace/, as the Dockerfile makes it."""
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise TestbedError(
            "building the workspace image needs mmdebstrap (Debian package 'mmdebstrap')"
        )
    key = workspace_key()

    def make(archive: Path, name: str) -> None:
        log(f"building the workspace image from Debian {SUITE} packages (about a minute)")
        packages = (WORKSPACE_DIR / "packages").read_text().split()
        layer = archive.with_suffix(".layer")
        hooks = [
            f"upload {WORKSPACE_DIR / 'devbox-image-setup'} /tmp/devbox-image-setup",
            'chroot "$1" sh /tmp/devbox-image-setup',
            'rm -f "$1/tmp/devbox-image-setup"',
            *(f"upload {WORKSPACE_DIR / name} {to}" for name, to in WORKSPACE_FILES.items()),
            *(f'chmod 0755 "$1{t}"' for t in WORKSPACE_FILES.values() if "/bin/" in t),
        ]
        command = [
            mmdebstrap,
            "--variant=apt",
            "--mode=root",
            "--format=tar",
            "--quiet",
            f"--include={','.join(packages)}",
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            *(f"--customize-hook={hook}" for hook in hooks),
            SUITE,
            str(layer),
            *MIRRORS,
        ]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            layer.unlink(missing_ok=True)
            tail = "\n".join(result.stderr.strip().splitlines()[-15:])
            raise TestbedError(f"building the workspace image failed:\n{tail}")
        write_archive(
            archive,
            name,
            [layer],
            {
                "Entrypoint": ["/usr/local/bin/devbox-entrypoint"],
                "Env": [
                    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "LANG=C.UTF-8",
                ],
                "WorkingDir": "/home/dev",
                "ExposedPorts": {"2222/tcp": {}},
            },
        )
        layer.unlink()

    image = _cached("workspace", key, make)
    return Image(image.archive, image.name, (image.name, *references))
