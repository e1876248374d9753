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
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from . import build
from .errors import TestbedError

REPO = Path(__file__).resolve().parent.parent.parent
WORKSPACE_DIR = REPO / "workspace"
# The files of workspace/ that go into the image, and where.
WORKSPACE_FILES = {
    "sshd_config": "/etc/ssh/sshd_config.d/00-devbox.conf",
    "devbox-entrypoint": "/usr/local/bin/devbox-entrypoint",
    "devbox-gpu-check": "/usr/local/bin/devbox-gpu-check",
    "devbox-gpu-sampler": "/usr/local/bin/devbox-gpu-sampler",
    "devbox-stop-notices": "/usr/local/bin/devbox-stop-notices",
    "devbox-activity-agent": "/usr/local/bin/devbox-activity-agent",
    "devbox-person-keys": "/usr/local/bin/devbox-person-keys",
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


def export(image: Image, reference: str, out: Path) -> None:
    """Write ``image`` as an OCI archive that names it ``reference`` (``repository:tag``),
    for `skopeo copy oci-archive:<out> docker://<registry>/<reference>` and the like."""
    partial = out.with_name(f".{out.name}.partial")
    with tarfile.open(image.archive) as source, tarfile.open(partial, "w") as target:
        for member in source.getmembers():
            if member.name == "index.json":
                extracted = source.extractfile(member)
                assert extracted is not None
                index = json.loads(extracted.read())
                for manifest in index["manifests"]:
                    manifest["annotations"] = {
                        "io.containerd.image.name": reference,
                        "org.opencontainers.image.ref.name": reference.rsplit(":", 1)[1],
                    }
                _add_bytes(target, "index.json", json.dumps(index).encode())
            elif member.isfile():
                target.addfile(member, source.extractfile(member))
            else:
                target.addfile(member)
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
        _mmdebstrap(packages, hooks, layer, "apt")
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


# The controller image: Debian's Python with a virtualenv holding the project's wheel and
# the controller's dependencies, as the chart runs it (`devboxes-controller serve`).
CONTROLLER_VENV = "/opt/devboxes"
CONTROLLER_PYTHON = "python3.11"  # Debian bookworm's, and the wheel's lowest supported
# Everything the wheel is built from: the app layer is rebuilt when any of it changes.
WHEEL_SOURCES = ("pyproject.toml", "README.md", "devboxes_sdk", "controller", "jupyter_ext")
WHEEL_IGNORED = ("node_modules", "__pycache__", ".ipynb_checkpoints", "lib", "tsconfig")


def _controller_requirements() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return sorted([*project["dependencies"], *project["optional-dependencies"]["controller"]])


def _wheel_key() -> str:
    digest = hashlib.sha256(LAYOUT_VERSION.encode())
    for name in WHEEL_SOURCES:
        root = REPO / name
        paths = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in paths:
            relative = path.relative_to(REPO)
            if path.is_file() and not any(part in WHEEL_IGNORED for part in relative.parts):
                digest.update(str(relative).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _controller_base(log: Callable[[str], None]) -> Path:
    """Debian's Python and a virtualenv with the controller's dependencies from PyPI."""
    requirements = _controller_requirements()
    key = hashlib.sha256(f"{LAYOUT_VERSION} {SUITE} {requirements}".encode()).hexdigest()[:12]
    layer = images_dir() / f"controller-base-{key}.layer"
    with (images_dir() / ".controller-base.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if layer.is_file():
            return layer
        for stale in images_dir().glob("controller-base-*.layer"):
            stale.unlink()
        log("building the controller image's base from Debian packages and PyPI (a minute or two)")
        with tempfile.TemporaryDirectory() as scratch:
            # This machine's pip fetches the wheels (with its own index and certificate
            # settings); the image installs them from that directory alone.
            wheels = Path(scratch) / "wheels"
            fetched = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                 "--only-binary=:all:", "--dest", str(wheels), *requirements],
                capture_output=True,
                text=True,
            )  # fmt: skip
            if fetched.returncode != 0:
                raise TestbedError(f"fetching the controller's wheels failed: {fetched.stderr}")
            pip = f"{CONTROLLER_VENV}/bin/pip"
            quoted = " ".join(f"'{r}'" for r in requirements)
            hooks = [
                f"copy-in {wheels} /tmp",
                f'chroot "$1" {CONTROLLER_PYTHON} -m venv {CONTROLLER_VENV}',
                f'chroot "$1" {pip} install --quiet --no-index --find-links /tmp/wheels '
                f"--disable-pip-version-check {quoted}",
                'rm -rf "$1/tmp/wheels"',
            ]
            _mmdebstrap(["python3", "python3-venv", "ca-certificates"], hooks, layer, "minbase")
    return layer


def _mmdebstrap(packages: list[str], hooks: list[str], out: Path, variant: str) -> None:
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise TestbedError("building images needs mmdebstrap (Debian package 'mmdebstrap')")
    partial = out.with_name(f".{out.name}.partial")
    command = [
        mmdebstrap,
        f"--variant={variant}",
        "--mode=root",
        "--format=tar",
        "--quiet",
        f"--include={','.join(packages)}",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        *(f"--customize-hook={hook}" for hook in hooks),
        SUITE,
        str(partial),
        *MIRRORS,
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        tail = "\n".join(result.stderr.strip().splitlines()[-15:])
        raise TestbedError(f"mmdebstrap failed:\n{tail}")
    partial.rename(out)


def _controller_app(layer: Path, log: Callable[[str], None]) -> None:
    """The project's wheel, built from this checkout and installed into the virtualenv."""
    log("building the project's wheel for the controller image")
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        env = {**os.environ, "SKIP_JUPYTER_BUILDER": "1"}
        built = subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--outdir", str(work / "dist"), str(REPO)],
            capture_output=True,
            text=True,
            env=env,
        )
        if built.returncode != 0:
            tail = "\n".join(built.stderr.strip().splitlines()[-15:])
            raise TestbedError(f"building the wheel failed:\n{tail}")
        (wheel,) = (work / "dist").glob("*.whl")
        site = (
            work
            / "root"
            / CONTROLLER_VENV.lstrip("/")
            / "lib"
            / CONTROLLER_PYTHON
            / "site-packages"
        )
        installed = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
             "--disable-pip-version-check", "--target", str(site), str(wheel)],
            capture_output=True,
            text=True,
        )  # fmt: skip
        if installed.returncode != 0:
            raise TestbedError(f"installing the wheel failed: {installed.stderr.strip()}")
        shutil.rmtree(site / "bin", ignore_errors=True)
        bin_dir = work / "root" / CONTROLLER_VENV.lstrip("/") / "bin"
        bin_dir.mkdir(parents=True)
        script = bin_dir / "devboxes-controller"
        script.write_text(
            f"#!{CONTROLLER_VENV}/bin/python3\n"
            "import sys\n"
            "from devboxes_controller.__main__ import main\n"
            "sys.exit(main())\n"
        )
        script.chmod(0o755)
        with tarfile.open(layer, "w") as tar:
            for path in sorted((work / "root").rglob("*")):
                info = tar.gettarinfo(path, arcname=str(path.relative_to(work / "root")))
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mtime = 0
                if path.is_file():
                    with path.open("rb") as source:
                        tar.addfile(info, source)
                else:
                    tar.addfile(info)


def controller_image(references: tuple[str, ...], log: Callable[[str], None] = print) -> Image:
    """The controller image the chart runs, from Debian's Python, PyPI and this checkout."""
    base = _controller_base(log)
    key = hashlib.sha256(f"{base.name} {_wheel_key()}".encode()).hexdigest()[:12]

    def make(archive: Path, name: str) -> None:
        app = archive.with_suffix(".layer")
        _controller_app(app, log)
        path = f"{CONTROLLER_VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        write_archive(
            archive,
            name,
            [base, app],
            {"Env": [f"PATH={path}", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1"]},
        )
        app.unlink()

    image = _cached("controller", key, make)
    return Image(image.archive, image.name, (image.name, *references))
