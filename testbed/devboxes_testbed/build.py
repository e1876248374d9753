"""Build the testbed binaries from the Go module proxy into a versioned cache outside the repo.

Each binary comes from a small wrapper module under ``testbed/go/``. The cache key is a
hash of those modules' files (go.mod, go.sum and any source), the Go version and the
ldflags, so a build happens only when the pins change.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import TestbedError

GO_DIR = Path(__file__).resolve().parent.parent / "go"

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v3.21.4"
CONTAINERD_VERSION = "v2.2.9"
RUNC_VERSION = "v1.4.4"
CNI_PLUGINS_VERSION = "v1.9.1"
ZITADEL_OIDC_VERSION = "v3.52.0"
DISTRIBUTION_VERSION = "v3.1.2"


@dataclass(frozen=True)
class Target:
    """One binary: the wrapper module it is built in, its package and its ldflags."""

    name: str
    module: str
    package: str
    ldflags: tuple[str, ...] = ()
    # runc alone needs cgo: its namespace setup runs as C before the Go runtime starts,
    # and its seccomp filters come from libseccomp.
    cgo: bool = False
    tags: tuple[str, ...] = ()
    # Where in the cache directory it goes: CNI plugins are looked up by their bare name
    # in a directory of their own.
    subdir: str = ""
    # Only the real node runs it: the control plane is usable without it (``installed``).
    # It is built on every machine all the same, so a break in it shows wherever the
    # testbed is built, not only where a real node can run.
    real_node: bool = False

    @property
    def path(self) -> str:
        return f"{self.subdir}/{self.name}" if self.subdir else self.name


def _kube_ldflags() -> tuple[str, ...]:
    major, minor, _ = KUBERNETES_VERSION.lstrip("v").split(".")
    stamps = {
        "gitVersion": KUBERNETES_VERSION,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
    }
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.{key}={value}" for key, value in stamps.items()]
    return tuple(flags)


TARGETS: tuple[Target, ...] = (
    *(
        Target(name, "kubernetes", f"./cmd/{name}", _kube_ldflags())
        for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
    ),
    *(
        Target(name, "kubernetes", f"./cmd/{name}", _kube_ldflags(), real_node=True)
        for name in ("kubelet", "kube-proxy")
    ),
    Target("etcd", "etcd", "go.etcd.io/etcd/server/v3"),
    Target(
        "kwok",
        "kwok",
        "sigs.k8s.io/kwok/cmd/kwok",
        (f"-X sigs.k8s.io/kwok/pkg/consts.Version={KWOK_VERSION}",),
    ),
    Target(
        "helm",
        "helm",
        "helm.sh/helm/v3/cmd/helm",
        (f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",),
    ),
    # The real node's container runtime. The storage drivers that need C headers are left
    # out: the node uses overlayfs.
    *(
        Target(
            name,
            "containerd",
            f"github.com/containerd/containerd/v2/cmd/{name}",
            (f"-X github.com/containerd/containerd/v2/version.Version={CONTAINERD_VERSION}",),
            tags=("no_btrfs", "no_devmapper", "no_zfs"),
            real_node=True,
        )
        for name in ("containerd", "containerd-shim-runc-v2", "ctr")
    ),
    Target(
        "runc",
        "runc",
        "github.com/opencontainers/runc",
        (f"-X main.version={RUNC_VERSION.lstrip('v')}",),
        cgo=True,
        tags=("seccomp",),
        real_node=True,
    ),
    *(
        Target(
            package.rsplit("/", 1)[1],
            "cni",
            f"github.com/containernetworking/plugins/plugins/{package}",
            subdir="cni",
            real_node=True,
        )
        for package in ("main/bridge", "main/loopback", "ipam/host-local", "meta/portmap")
    ),
    Target("pause", "pause", ".", real_node=True),
    Target("fakegpu", "fakegpu", ".", real_node=True),
    Target("fakedra", "fakedra", ".", real_node=True),
)


def cache_root() -> Path:
    base = os.environ.get("DEVBOXES_TESTBED_CACHE") or os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base else Path.home() / ".cache"
    return root / "devboxes-testbed" if not os.environ.get("DEVBOXES_TESTBED_CACHE") else root


def go_binary() -> str:
    go = shutil.which("go")
    if go is None:
        raise TestbedError(
            "the Go toolchain is needed to build the testbed (Go >= 1.26 on PATH as 'go'); "
            "install it from your distribution or https://go.dev/dl"
        )
    return go


def go_version(go: str) -> str:
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def cache_key(go: str) -> str:
    digest = hashlib.sha256()
    digest.update(go_version(go).encode())
    for target in TARGETS:
        digest.update(repr(target).encode())
    for module in sorted({t.module for t in TARGETS}):
        module_dir = GO_DIR / module
        for path in sorted(p for p in module_dir.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(module_dir)).encode())
            digest.update(path.read_bytes())
    return f"k8s-{KUBERNETES_VERSION}-{digest.hexdigest()[:12]}"


def bin_dir(go: str | None = None) -> Path:
    return cache_root() / cache_key(go or go_binary()) / "bin"


# kwok v0.8 ships no default stages; these upstream stage files, taken from the pinned
# module, make simulated nodes Ready and walk pods through create, ready and delete.
KWOK_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat/node-heartbeat.yaml",
    "pod/general/pod-create.yaml",
    "pod/general/pod-ready.yaml",
    "pod/general/pod-complete.yaml",
    "pod/general/pod-delete.yaml",
)
STAGES_DIR = "kwok-stages"


def _complete(directory: Path, targets: Iterable[Target]) -> bool:
    return all((directory / t.path).is_file() for t in targets) and all(
        (directory / STAGES_DIR / Path(stage).name).is_file() for stage in KWOK_STAGES
    )


def installed() -> Path | None:
    """The cached binaries' directory when the control plane's (helm and kubectl among
    them) are present, else None."""
    try:
        directory = bin_dir()
    except TestbedError:
        return None
    control_plane = [t for t in TARGETS if not t.real_node]
    return directory if _complete(directory, control_plane) else None


def stage_files(directory: Path) -> list[Path]:
    return [directory / STAGES_DIR / Path(stage).name for stage in KWOK_STAGES]


def _copy_kwok_stages(go: str, directory: Path) -> None:
    result = subprocess.run(
        [go, "mod", "download", "-json", f"sigs.k8s.io/kwok@{KWOK_VERSION}"],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    if result.returncode != 0:
        raise TestbedError(f"fetching kwok {KWOK_VERSION} stages failed: {result.stderr.strip()}")
    source = Path(json.loads(result.stdout)["Dir"]) / "kustomize" / "stage"
    target = directory / STAGES_DIR
    target.mkdir(parents=True, exist_ok=True)
    for stage in KWOK_STAGES:
        shutil.copyfile(source / stage, target / Path(stage).name)


def ensure_built(log: Callable[[str], None] = print) -> Path:
    """Build whatever is missing for the pinned versions; return the binaries' directory."""
    go = go_binary()
    directory = bin_dir(go)
    if _complete(directory, TARGETS):
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    # Two test runs or a test run and `make testbed` may start at once: one builds, the
    # other waits and then finds everything built.
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _complete(directory, TARGETS):
            _build_missing(go, directory, log)
    return directory


def _build_missing(go: str, directory: Path, log: Callable[[str], None]) -> None:
    missing = [t for t in TARGETS if not (directory / t.path).is_file()]
    log(f"building {len(missing)} testbed binaries into {directory} (first build takes a while)")
    for index, target in enumerate(missing, 1):
        started = time.monotonic()
        log(f"[{index}/{len(missing)}] go build {target.name} ...")
        _build(go, directory, target)
        log(f"[{index}/{len(missing)}] {target.name} built in {time.monotonic() - started:.0f}s")
    _copy_kwok_stages(go, directory)


def _build(go: str, directory: Path, target: Target) -> None:
    (directory / target.path).parent.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{target.name}.partial"
    command = [go, "build", "-trimpath", "-o", str(partial)]
    command += ["-ldflags", " ".join(("-s", "-w", *target.ldflags))]
    if target.tags:
        command += ["-tags", ",".join(target.tags)]
    command.append(target.package)
    env = {**os.environ, "CGO_ENABLED": "1" if target.cgo else "0", "GOFLAGS": "-mod=mod"}
    result = subprocess.run(
        command, cwd=GO_DIR / target.module, env=env, capture_output=True, text=True
    )
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-15:])
        raise TestbedError(f"building {target.name} failed:\n{tail}")
    partial.rename(directory / target.path)


# The OpenID provider (testbed/go/issuer) and the OCI registry (testbed/go/registry) are
# cached under keys of their own, so that a change to one never rebuilds Kubernetes and a
# Kubernetes pin never rebuilds them.
ISSUER = Target("issuer", "issuer", ".")
REGISTRY = Target(
    "registry",
    "registry",
    "github.com/distribution/distribution/v3/cmd/registry",
    (f"-X github.com/distribution/distribution/v3/version.version={DISTRIBUTION_VERSION}",),
)


def _ensure_own(target: Target, log: Callable[[str], None]) -> Path:
    """Build ``target`` if its cached binary is missing; return its path. The cache key is
    the Go version and the files of its wrapper module."""
    go = go_binary()
    digest = hashlib.sha256(go_version(go).encode())
    digest.update(repr(target).encode())
    module_dir = GO_DIR / target.module
    for path in sorted(p for p in module_dir.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(module_dir)).encode())
        digest.update(path.read_bytes())
    directory = cache_root() / f"{target.name}-{digest.hexdigest()[:12]}"
    binary = directory / target.path
    if binary.is_file():
        return binary
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.is_file():
            log(f"go build {target.name} into {directory} ...")
            _build(go, directory, target)
    return binary


def ensure_issuer(log: Callable[[str], None] = print) -> Path:
    """The testbed's OpenID provider, built if missing."""
    return _ensure_own(ISSUER, log)


def ensure_registry(log: Callable[[str], None] = print) -> Path:
    """The testbed's OCI registry (the CNCF distribution registry), built if missing."""
    return _ensure_own(REGISTRY, log)


_STAGING = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", re.MULTILINE)


def staging_modules(go: str) -> list[str]:
    """The staging modules that the published k8s.io/kubernetes go.mod replaces with local paths."""
    result = subprocess.run(
        [go, "mod", "download", "-json", f"k8s.io/kubernetes@{KUBERNETES_VERSION}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    gomod = Path(json.loads(result.stdout)["GoMod"]).read_text()
    return sorted(set(_STAGING.findall(gomod)))


def pin() -> None:
    """Rewrite the wrapper modules' go.mod files for the pinned versions and tidy them."""
    go = go_binary()
    staging_version = "v0." + KUBERNETES_VERSION.lstrip("v").split(".", 1)[1]
    replaces = "\n".join(f"\t{m} => {m} {staging_version}" for m in staging_modules(go))
    (GO_DIR / "kubernetes" / "go.mod").write_text(
        "module devboxes.local/testbed/kubernetes\n\n"
        "go 1.26.0\n\n"
        f"require k8s.io/kubernetes {KUBERNETES_VERSION}\n\n"
        f"replace (\n{replaces}\n)\n"
    )
    tools = {
        "etcd": f"go.etcd.io/etcd/server/v3@{ETCD_VERSION}",
        "kwok": f"sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION}",
        "helm": f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}",
        "runc": f"github.com/opencontainers/runc@{RUNC_VERSION}",
    }
    grouped = {
        **{module: [tool] for module, tool in tools.items()},
        "containerd": [
            f"github.com/containerd/containerd/v2/cmd/{t.name}@{CONTAINERD_VERSION}"
            for t in TARGETS
            if t.module == "containerd"
        ],
        "cni": [f"{t.package}@{CNI_PLUGINS_VERSION}" for t in TARGETS if t.module == "cni"],
    }
    for module, module_tools in grouped.items():
        directory = GO_DIR / module
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "go.mod").write_text(f"module devboxes.local/testbed/{module}\n\ngo 1.26.0\n")
        subprocess.run([go, "get", "-tool", *module_tools], cwd=directory, check=True)
    kubelet_api = f"k8s.io/kubelet@{staging_version}"
    subprocess.run([go, "get", kubelet_api], cwd=GO_DIR / "fakegpu", check=True)
    dra_modules = ("dynamic-resource-allocation", "api", "apimachinery", "client-go")
    dra = [f"k8s.io/{module}@{staging_version}" for module in dra_modules]
    subprocess.run([go, "get", *dra], cwd=GO_DIR / "fakedra", check=True)
    oidc = f"github.com/zitadel/oidc/v3@{ZITADEL_OIDC_VERSION}"
    subprocess.run([go, "get", oidc], cwd=GO_DIR / ISSUER.module, check=True)
    registry = f"{REGISTRY.package}@{DISTRIBUTION_VERSION}"
    directory = GO_DIR / REGISTRY.module
    (directory / "go.mod").write_text(
        f"module devboxes.local/testbed/{REGISTRY.module}\n\ngo 1.26.0\n"
    )
    subprocess.run([go, "get", "-tool", registry], cwd=directory, check=True)
    for module in (
        "kubernetes", "pause", "fakegpu", "fakedra", ISSUER.module, REGISTRY.module, *grouped
    ):  # fmt: skip
        subprocess.run([go, "mod", "tidy"], cwd=GO_DIR / module, check=True)
    print("pinned; commit testbed/go/*/go.mod and go.sum", file=sys.stderr)
