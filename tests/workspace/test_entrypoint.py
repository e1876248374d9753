"""The workspace entrypoint's group step, run for real with the real shadow utilities.

Each test builds a throwaway root holding this machine's own `groupadd`, `useradd`,
`usermod`, `getent`, `id` and `sh` with the shared libraries they load, a real
/etc/passwd and /etc/group (with shadow files), and the entrypoint script. The script then
runs chrooted, so every change lands in that root's files and never on the machine.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENTRYPOINT = REPO / "workspace" / "devbox-entrypoint"
GPU_CHECK = REPO / "workspace" / "devbox-gpu-check"
IMAGE_SETUP = REPO / "workspace" / "devbox-image-setup"
STOP_NOTICES = REPO / "workspace" / "devbox-stop-notices"
SIMULATED_NVIDIA_SMI = REPO / "testbed" / "devboxes_testbed" / "nvidia-smi"
TOOLS = ("sh", "getent", "groupadd", "useradd", "usermod", "id")
ACCOUNT_FILES = ("passwd", "group", "shadow", "gshadow")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
VIDEO_GID = 44

Run = Callable[..., subprocess.CompletedProcess[str]]


def shared_libraries(binary: str) -> list[str]:
    output = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    paths = []
    for line in output.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) > parts.index("=>") + 1:
            candidate = parts[parts.index("=>") + 1]
        elif parts and parts[0].startswith("/"):
            candidate = parts[0]
        else:
            continue
        if candidate.startswith("/"):
            paths.append(candidate)
    return paths


def copy_into(root: Path, path: str) -> None:
    target = root / path.lstrip("/")
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, target)


def build_root(root: Path) -> None:
    # Mirror merged-/usr links such as /bin -> usr/bin so every path ldd prints resolves.
    for top in ("bin", "sbin", "lib", "lib32", "lib64"):
        host = Path("/") / top
        if host.is_symlink():
            link = os.readlink(host)
            (root / top).parent.mkdir(parents=True, exist_ok=True)
            (root / link.lstrip("/")).mkdir(parents=True, exist_ok=True)
            (root / top).symlink_to(link)
    for tool in TOOLS:
        binary = shutil.which(tool, path=PATH)
        assert binary is not None
        copy_into(root, binary)
        for library in shared_libraries(os.path.realpath(binary)):
            copy_into(root, library)
    etc = root / "etc"
    etc.mkdir()
    for name in ("passwd", "group", "login.defs"):
        shutil.copy2(Path("/etc") / name, etc / name)
    # Shadow entries without any password: the host's hashes never leave /etc.
    users = [line.split(":", 1)[0] for line in (etc / "passwd").read_text().splitlines() if line]
    (etc / "shadow").write_text("".join(f"{u}:*:19000:0:99999:7:::\n" for u in users))
    groups = [line.split(":") for line in (etc / "group").read_text().splitlines() if line]
    (etc / "gshadow").write_text("".join(f"{g[0]}:*::{g[3]}\n" for g in groups))
    (etc / "shadow").chmod(0o640)
    (etc / "gshadow").chmod(0o640)
    (etc / "nsswitch.conf").write_text(
        "passwd: files\ngroup: files\nshadow: files\ngshadow: files\n"
    )
    (root / "dev").mkdir()
    os.mknod(root / "dev" / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    (root / "tmp").mkdir(mode=0o1777)
    bin_dir = root / "usr" / "local" / "bin"
    bin_dir.mkdir(parents=True)
    shutil.copy2(ENTRYPOINT, bin_dir / "devbox-entrypoint")


def free_id(root: Path) -> int:
    """The first id from 1000 up that no user or group of the copied files uses."""
    used = set()
    for name in ("passwd", "group"):
        for line in (root / "etc" / name).read_text().splitlines():
            if line:
                used.add(int(line.split(":")[2]))
    return next(i for i in range(1000, 60000) if i not in used)


@pytest.fixture(scope="session")
def template_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0:
        pytest.skip("the group step changes /etc/group through chroot, which needs root")
    missing = [tool for tool in (*TOOLS, "ldd", "chroot") if shutil.which(tool, path=PATH) is None]
    if missing:
        pytest.skip(f"this machine lacks {', '.join(missing)} to build a throwaway root")
    root = tmp_path_factory.mktemp("rootfs") / "root"
    build_root(root)
    dev_id = free_id(root)
    setup = [
        ["groupadd", "--gid", str(dev_id), "devtest"],
        [
            "useradd",
            "--no-create-home",
            "--uid",
            str(dev_id),
            "--gid",
            "devtest",
            "--home-dir",
            "/home/dev",
            "--shell",
            "/bin/sh",
            "dev",
        ],
    ]
    existing = (root / "etc" / "group").read_text()
    if f":{VIDEO_GID}:" not in existing:
        setup.insert(0, ["groupadd", "--gid", str(VIDEO_GID), "video"])
    for command in setup:
        subprocess.run(["chroot", str(root), *command], check=True, env={"PATH": PATH})
    return root


@pytest.fixture
def root(template_root: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "root"
    shutil.copytree(template_root, copy, symlinks=True)
    return copy


@pytest.fixture
def chroot(root: Path) -> Run:
    def run(*command: str, groups: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {"PATH": PATH}
        if groups is not None:
            env["DEVBOX_GPU_SUPPLEMENTAL_GROUPS"] = groups
        return subprocess.run(
            ["chroot", str(root), *command], capture_output=True, text=True, env=env, timeout=60
        )

    return run


def group_step(chroot: Run, groups: str | None) -> subprocess.CompletedProcess[str]:
    return chroot("/usr/local/bin/devbox-entrypoint", "groups", groups=groups)


def accounts(root: Path) -> dict[str, bytes]:
    return {name: (root / "etc" / name).read_bytes() for name in ACCOUNT_FILES}


def dev_groups(chroot: Run) -> set[str]:
    result = chroot("id", "-Gn", "dev")
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def group_line(chroot: Run, key: str) -> str:
    result = chroot("getent", "group", key)
    return result.stdout.strip()


def test_creates_missing_groups_and_reuses_existing_ones(root: Path, chroot: Run) -> None:
    video = group_line(chroot, str(VIDEO_GID)).split(":")[0]
    result = group_step(chroot, f"{VIDEO_GID},5000,2147483647")
    assert result.returncode == 0, result.stderr
    assert dev_groups(chroot) == {
        "devtest",
        video,
        "devbox-device-5000",
        "devbox-device-2147483647",
    }
    assert group_line(chroot, "5000") == "devbox-device-5000:x:5000:dev"
    assert group_line(chroot, "2147483647") == "devbox-device-2147483647:x:2147483647:dev"
    # The existing group is reused under its own name; no devbox-device-44 appears.
    assert group_line(chroot, f"devbox-device-{VIDEO_GID}") == ""
    assert group_line(chroot, str(VIDEO_GID)).startswith(f"{video}:x:{VIDEO_GID}:")
    assert "dev" in group_line(chroot, str(VIDEO_GID)).split(":")[3].split(",")


def test_a_second_run_changes_nothing(root: Path, chroot: Run) -> None:
    first = group_step(chroot, f"5000,{VIDEO_GID}")
    assert first.returncode == 0, first.stderr
    before = accounts(root)
    second = group_step(chroot, f"5000,{VIDEO_GID}")
    assert second.returncode == 0, second.stderr
    assert accounts(root) == before


def test_a_group_that_already_has_the_device_name_and_gid_is_reused(
    root: Path, chroot: Run
) -> None:
    assert chroot("groupadd", "--gid", "6000", "devbox-device-6000").returncode == 0
    result = group_step(chroot, "6000")
    assert result.returncode == 0, result.stderr
    assert group_line(chroot, "devbox-device-6000") == "devbox-device-6000:x:6000:dev"
    assert (root / "etc" / "group").read_text().count("devbox-device-6000:") == 1


def test_the_primary_group_can_be_listed(root: Path, chroot: Run) -> None:
    primary = group_line(chroot, "devtest").split(":")[2]
    result = group_step(chroot, primary)
    assert result.returncode == 0, result.stderr
    assert "devtest" in dev_groups(chroot)


def test_a_device_group_name_with_another_gid_is_refused_before_any_change(
    root: Path, chroot: Run
) -> None:
    assert chroot("groupadd", "--gid", "7001", "devbox-device-7000").returncode == 0
    before = accounts(root)
    result = group_step(chroot, "5001,7000")
    assert result.returncode != 0
    assert (
        "group 'devbox-device-7000' already exists with gid 7001 instead of 7000" in result.stderr
    )
    # 5001 comes first in the list but was not created: nothing changes on a refusal.
    assert accounts(root) == before


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        pytest.param(
            ",".join(str(g) for g in range(5000, 5009)), "it lists 9 group ids", id="nine-ids"
        ),
        pytest.param("0", "group id 0 is the root group", id="zero"),
        pytest.param("44,0", "group id 0 is the root group", id="zero-after-valid"),
        pytest.param("5000,5000", "group id 5000 appears twice", id="duplicate"),
        pytest.param("5000,abc", "only digits and commas are allowed", id="non-numeric"),
        pytest.param("-5", "only digits and commas are allowed", id="negative"),
        pytest.param("5000, 5001", "only digits and commas are allowed", id="space"),
        pytest.param(
            "2147483648", "group id 2147483648 is larger than 2147483647", id="above-maximum"
        ),
        pytest.param("99999999999999999999", "is larger than 2147483647", id="huge"),
        pytest.param("044", "has a leading zero", id="leading-zero"),
        pytest.param("5000,", "it has an empty entry", id="trailing-comma"),
        pytest.param("5000,,5001", "it has an empty entry", id="empty-entry"),
    ],
)
def test_invalid_lists_are_refused_with_a_clear_message(
    root: Path, chroot: Run, groups: str, message: str
) -> None:
    before = accounts(root)
    result = group_step(chroot, groups)
    assert result.returncode != 0
    assert f"DEVBOX_GPU_SUPPLEMENTAL_GROUPS='{groups}' is invalid" in result.stderr
    assert message in result.stderr
    assert "at most 8 comma-separated group ids" in result.stderr
    assert accounts(root) == before


def test_eight_ids_are_accepted(chroot: Run) -> None:
    ids = [str(g) for g in range(5000, 5008)]
    result = group_step(chroot, ",".join(ids))
    assert result.returncode == 0, result.stderr
    assert {f"devbox-device-{g}" for g in ids} <= dev_groups(chroot)


@pytest.mark.parametrize("groups", [None, ""], ids=["unset", "empty"])
def test_no_groups_means_no_change(root: Path, chroot: Run, groups: str | None) -> None:
    before = accounts(root)
    result = group_step(chroot, groups)
    assert result.returncode == 0, result.stderr
    assert accounts(root) == before


def test_unknown_command_is_refused(chroot: Run) -> None:
    result = chroot("/usr/local/bin/devbox-entrypoint", "grups")
    assert result.returncode != 0
    assert "unknown command 'grups'" in result.stderr


@pytest.mark.parametrize(
    "script",
    [ENTRYPOINT, GPU_CHECK, IMAGE_SETUP, STOP_NOTICES, SIMULATED_NVIDIA_SMI],
    ids=lambda p: p.name,
)
def test_scripts_pass_shellcheck(script: Path) -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (Debian package 'shellcheck')")
    result = subprocess.run([shellcheck, "--shell=sh", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
