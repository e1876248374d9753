"""What each ``devbox`` command does, on the client, and how it ends: its exit code, or a
:class:`UsageError` when the command line cannot be carried out as given."""

from __future__ import annotations

import argparse
import getpass
import os
import re
import shutil
import sys
import threading
import time
import webbrowser
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, TextIO

from pydantic import BaseModel

from devboxes_sdk import _cli_ssh, _render, oidc_login
from devboxes_sdk._cli_base import (
    EXIT_ERROR,
    EXIT_OK,
    UsageError,
    clean,
    command_settings,
    known_hosts,
    print_error,
    print_json,
    ssh_stdio,
)
from devboxes_sdk.client import DEFAULT_PAGE_SIZE, Client, Devbox, usage_query
from devboxes_sdk.clusters import AmbiguousName, Answers, ClusterError, Clusters, Profiles
from devboxes_sdk.config import (
    AUTO_CLUSTER,
    CLUSTER_SEPARATOR,
    ENV_CLUSTER,
    ENV_TOKEN,
    ENV_URL,
    FileConfig,
    chosen_cluster,
    config_path,
    normalize_token,
    normalize_url,
    read_config,
    split_name,
    with_cluster_token,
    write_clusters,
    write_config,
)
from devboxes_sdk.errors import (
    ConfigurationError,
    Conflict,
    DevboxesError,
    NotFound,
    PermissionDenied,
    ValidationError,
)
from devboxes_sdk.labels import elapsed_label, status_line
from devboxes_sdk.models import (
    API_PREFIX,
    DevboxState,
    GpuAvailability,
    GpuWhen,
    UsageReport,
    Volume,
)
from devboxes_sdk.tunnel import HOST_SUFFIX

# A .pub file is one line; anything much longer is not one.
MAX_KEY_FILE_BYTES = 16384

# whoami's mode for the operator token.
OPERATOR_MODE = "operator"

# The server's host and user become one argument of the local ssh; neither may start
# with "-" or hold anything but name characters, so that a server can never slip in an
# option (e.g. ProxyCommand).
_SSH_HOST_RE = re.compile(r"^[A-Za-z0-9.:\[\]_][A-Za-z0-9.:\[\]_-]*$")
_SSH_USER_RE = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]{0,63}$")

# The API's names for the fields of a create, and the flags that set them, so that a
# refused request is explained in the words the user typed. None: the message already
# names the field in plain words.
_CREATE_FLAGS: dict[str, str | None] = {
    "name": None,
    "preset": "--preset",
    "ttl_hours": "--ttl",
    "repository": "--repo",
    "gpu": "--gpu",
    "gpu.profile": "--gpu-profile",
    "image": "--image",
}
_EXTEND_FLAGS: dict[str, str | None] = {"hours": "--hours"}
_BOOK_FLAGS: dict[str, str | None] = {
    "profile": "PROFILE",
    "starts_at": "--at",
    "hours": "--hours",
    "box": "--box",
}
_USAGE_FLAGS: dict[str, str | None] = {
    "query.since": "--since",
    "query.until": "--until",
    "query.group_by": "--group-by",
}
_FLAG_UNITS = {"--ttl": ("hour", "hours")}
_TRAILING_NUMBER = re.compile(r"\b(\d+)$")

# -- helpers ------------------------------------------------------------------------


def _client(args: argparse.Namespace) -> Client:
    """A client for the URL and token of the command line, environment or config file,
    with problems explained in terms of this command's options."""
    settings = command_settings(args.url, args.token, args.cluster)
    return Client(settings.url, settings.token)


def _several(args: argparse.Namespace) -> Clusters | None:
    """Every configured cluster, for a command that shows them all, when the command
    line and the environment name no one controller and the file has several."""
    one = (args.url, args.token, args.cluster, os.environ.get(ENV_URL, "").strip())
    if any(one) or os.environ.get(ENV_CLUSTER, "").strip():
        return None
    if len(read_config(config_path()).clusters) < 2:
        return None
    return Clusters()


def settle_cluster(args: argparse.Namespace) -> None:
    """Find the cluster a command acts on: ``NAME@CLUSTER``'s, or the one cluster where a
    bare NAME of an existing box is (asked in parallel when there are several)."""
    name = getattr(args, "name", None)
    if isinstance(name, str) and CLUSTER_SEPARATOR in name:
        args.name, named = split_name(name)
        if args.cluster is not None and args.cluster != named:
            raise UsageError(
                f"{args.name}{CLUSTER_SEPARATOR}{named} and --cluster {args.cluster} disagree"
            )
        args.cluster = named
    if args.cluster == AUTO_CLUSTER and args.handler is not cmd_create:
        raise UsageError(f"--cluster {AUTO_CLUSTER} goes with create; name a cluster")
    if not getattr(args, "existing_box", False):
        return
    clusters = _several(args)
    if clusters is None:
        return
    if args.handler is cmd_volume_purge:
        # Which cluster's files are gone for good is never guessed.
        raise UsageError(
            f"several clusters are configured: say which holds the volume, "
            f"{args.name}{CLUSTER_SEPARATOR}CLUSTER ({', '.join(clusters.names)})"
        )
    with clusters:
        try:
            args.cluster = clusters.locate(args.name).cluster
        except AmbiguousName as error:
            raise UsageError(str(error)) from None


def _report_silent(errors: Sequence[ClusterError]) -> None:
    """One line on stderr per cluster that gave no answer."""
    for error in errors:
        print_error(f"{error.cluster}: {error.message}")


def _json_errors(errors: Sequence[ClusterError]) -> list[dict[str, str]]:
    return [{"cluster": error.cluster, "error": error.message} for error in errors]


def _merged_exit(answered: Answers[Any]) -> int:
    """A merged view fails only when no cluster answered."""
    _report_silent(answered.errors)
    for note in answered.notes:
        print_error(f"note: {note}")
    return EXIT_OK if answered.answers or not answered.errors else EXIT_ERROR


def _now() -> datetime:
    return datetime.now(UTC)


def _print_box(box: Devbox, args: argparse.Namespace) -> None:
    if args.json:
        print_json(box.raw)
    else:
        print(_render.boxes_table([box], _now()))


class Progress:
    """Shows a box's way to ready on a stream: a live spinner on a terminal with how long
    the current step has lasted and how long since the request, otherwise one line per
    change of state or message, with the seconds since the request."""

    _UNICODE_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
    _ASCII_FRAMES = "|/-\\"
    _INTERVAL = 0.1

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._clock = clock
        self._asked = self._since = clock()
        self._live = stream.isatty()
        encoding = (getattr(stream, "encoding", None) or "ascii").lower()
        unicode = "utf" in encoding
        self._frames = self._UNICODE_FRAMES if unicode else self._ASCII_FRAMES
        self._ellipsis = "…" if unicode else "..."
        self._text = ""
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def update(self, box: Devbox) -> None:
        line = _render.progress_line(box)
        if line == self._text:
            return
        now = self._clock()
        if not self._live:
            self._text = line
            print(f"{line} (after {int(now - self._asked)} s)", file=self._stream, flush=True)
            return
        with self._lock:
            self._text = line
            self._since = now
        if self._thread is None:
            self._thread = threading.Thread(target=self._spin, name="devbox-spinner", daemon=True)
            self._thread.start()

    def _spin(self) -> None:
        frame = 0
        while True:
            with self._lock:
                now = self._clock()
                elapsed = elapsed_label(now - self._since, now - self._asked)
                line = f"{self._text} {elapsed}"
                text = f"{self._frames[frame % len(self._frames)]} {line}"
                # One short of the edge: a wrapped line cannot be erased with \r.
                width = max(shutil.get_terminal_size().columns - 1, 10)
                text = _render.fit(text, width, self._ellipsis)
                self._stream.write(f"\r\x1b[2K{text}")
                self._stream.flush()
            frame += 1
            if self._stopped.wait(self._INTERVAL):
                return

    def close(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._stream.write("\r\x1b[2K")
            self._stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _wait(box: Devbox, timeout: float) -> Devbox:
    with Progress(sys.stderr) as progress:
        if box.state is not DevboxState.READY:
            progress.update(box)
        return box.wait_ready(timeout, on_update=progress.update)


def not_ready(box: Devbox) -> DevboxesError:
    status = status_line(box.state, box.message)
    hint = f"start it with: devbox start {box.name}"
    if box.state is DevboxState.STARTING:
        hint = f"wait for it with: devbox start {box.name}"
    return DevboxesError(f"{box.name} is not ready ({status}); {hint}")


# -- commands -----------------------------------------------------------------------


def _read_token(url: str) -> str:
    if sys.stdin.isatty():
        return getpass.getpass(f"Token for {url}: ")
    return sys.stdin.readline()


def _login_target(args: argparse.Namespace) -> tuple[str, str | None]:
    """The URL a login is for, and the configured cluster whose token it saves (None: the
    file's one url and token)."""
    try:
        file = read_config(config_path())
    except ConfigurationError:
        if args.cluster is not None:
            raise
        # A file that cannot be read is replaced by a login to one controller, as it was.
        file = FileConfig(config_path())
    if args.cluster is not None:
        if file.url is not None or file.token is not None:
            raise UsageError(
                f"configuration file {file.path} holds one controller's url and token at its "
                "top: move them into a [clusters.NAME] table before logging in to a cluster"
            )
        known = next((entry for entry in file.clusters if entry.name == args.cluster), None)
        url = args.url or (known.url if known is not None else None)
        if not url:
            raise UsageError(
                f"cluster {args.cluster} is not configured yet: give its address with --url URL"
            )
        return normalize_url(url), args.cluster
    url = args.url or os.environ.get(ENV_URL) or file.url
    if file.clusters:
        wanted = normalize_url(url) if url else None
        named = [e.name for e in file.clusters if wanted and normalize_url(e.url) == wanted]
        if not named:
            raise UsageError(
                f"name the cluster to log in to: devbox login --cluster NAME "
                f"(configured: {', '.join(e.name for e in file.clusters)})"
            )
        return normalize_url(url or ""), named[0]
    if not url:
        raise UsageError("login needs --url URL, the address of your Devboxes server")
    return normalize_url(url), None


def _save_login(url: str, cluster: str | None, token: str) -> Path:
    path = config_path()
    if cluster is None:
        write_config(path, url, token)
    else:
        write_clusters(with_cluster_token(read_config(path), cluster, url, token))
    return path


def cmd_login(args: argparse.Namespace) -> int:
    if args.cluster == AUTO_CLUSTER:
        raise UsageError(f"--cluster {AUTO_CLUSTER} goes with create; name a cluster")
    url, cluster = _login_target(args)
    if args.oidc:
        return _oidc_login(args, url, cluster)
    if args.no_browser or args.device:
        raise UsageError(f"{'--device' if args.device else '--no-browser'} goes with --oidc")
    raw_token = args.token if args.token is not None else _read_token(url)
    token = normalize_token(raw_token, "--token" if args.token is not None else "the prompt")
    with Client(url, token) as client:
        me = client.whoami()
    path = _save_login(url, cluster, token)
    if args.json:
        print_json({"url": url, "user": me.user, "mode": me.mode, "config": str(path)})
    else:
        print(f"Logged in to {url} as {clean(me.user)}.")
        print(f"Configuration saved to {path} (readable only by you).")
    return EXIT_OK


def _oidc_login(args: argparse.Namespace, url: str, cluster: str | None) -> int:
    if args.token is not None:
        raise UsageError("--oidc and --token cannot be combined: --oidc gets the token")

    def show(authorize_url: str) -> None:
        # The URL holds no secret: a PKCE challenge and a state, both of this login only.
        print("Open this URL to log in:", file=sys.stderr)
        print(f"  {authorize_url}", file=sys.stderr, flush=True)

    def show_code(page: str, code: str, filled_in: str | None) -> None:
        # The issuer wrote these: shown without any terminal control characters.
        print(f"Open {clean(page)} in a browser and enter the code {clean(code)}", file=sys.stderr)
        if filled_in:
            print(f"  (or open {clean(filled_in)})", file=sys.stderr)
        print("Waiting for the login ...", file=sys.stderr, flush=True)

    if args.device and args.no_browser:
        raise UsageError("--device opens no browser already; leave out --no-browser")
    device = args.device or not (args.no_browser or _browser_available())
    if device and not args.device:
        # Waiting for a browser that never opens would only end in the login's timeout.
        print(
            "No browser can be opened here: logging in with a one-time code instead (--device).",
            file=sys.stderr,
        )
    if device:
        result = oidc_login.device_login(url, show_code)
    else:
        opener = None if args.no_browser else webbrowser.open
        result = oidc_login.login(url, show, opener)
    path = _save_login(url, cluster, result.token)
    groups = ", ".join(clean(g) for g in result.groups) or "none"
    if args.json:
        print_json(
            {
                "url": url,
                "user": result.user,
                "mode": "oidc",
                "groups": list(result.groups),
                "config": str(path),
            }
        )
    else:
        print(f"Logged in to {url} as {clean(result.user)} (oidc; groups: {groups}).")
        print(f"Configuration saved to {path} (readable only by you).")
    return EXIT_OK


def _browser_available() -> bool:
    """Whether ``webbrowser`` knows a browser to open here: none without a display or a
    text-mode browser, as in an SSH session (or the one ``$BROWSER`` names)."""
    try:
        webbrowser.get()
    except webbrowser.Error:
        return False
    return True


def cmd_whoami(args: argparse.Namespace) -> int:
    with _client(args) as client:
        if args.json:
            print_json(client.request_json("GET", f"{API_PREFIX}/whoami"))
            return EXIT_OK
        me = client.whoami()
    print(f"{clean(me.user)} ({clean(me.mode)}) at {client.url}")
    if me.groups:
        print(f"groups: {', '.join(clean(group) for group in me.groups)}")
    if me.admin:
        print("admin: sees and acts on every box")
    return EXIT_OK


def _names_or_json(args: argparse.Namespace) -> None:
    if args.quiet and args.json:
        raise UsageError("-q and --json cannot be combined (-q prints names, --json the JSON)")


def _availability(client: Client) -> GpuAvailability | None:
    """The free counts, or None from a server that predates them."""
    try:
        return client.gpu.availability()
    except NotFound:
        return None


def _when(client: Client) -> GpuWhen | None:
    """When devices come free, or None from a server that predates the answer."""
    try:
        return client.gpu.when()
    except NotFound:
        return None


def cmd_gpu_profiles(args: argparse.Namespace) -> int:
    _names_or_json(args)
    clusters = _several(args)
    if clusters is not None:
        with clusters:
            return _clusters_profiles(args, clusters.profiles())
    with _client(args) as client:
        catalog = client.capabilities().gpu
        counted = catalog.enabled and not args.quiet
        availability = _availability(client) if counted else None
        found = _when(client) if counted else None
    if args.json:
        data = catalog.model_dump(mode="json")
        if availability is not None:
            data["availability"] = availability.model_dump(mode="json")
        if found is not None:
            data["when"] = found.model_dump(mode="json")
        print_json(data)
    elif args.quiet:
        for profile in catalog.profiles:
            print(clean(profile.name))
    elif not catalog.enabled:
        print("GPU acceleration is disabled on this Devboxes server.")
    elif not catalog.profiles:
        print("No GPU profiles are configured.")
    else:
        print(_render.profiles_table(catalog, availability, found))
    return EXIT_OK


def _clusters_profiles(args: argparse.Namespace, answered: Answers[Profiles]) -> int:
    if args.json:
        print_json(
            {
                "clusters": [
                    {
                        "cluster": answer.cluster,
                        **answer.value.catalog.model_dump(mode="json"),
                        "availability": _dump(answer.value.availability),
                        "when": _dump(answer.value.when),
                    }
                    for answer in answered.answers
                ],
                "errors": _json_errors(answered.errors),
            }
        )
    elif args.quiet:
        names = dict.fromkeys(p.name for v in answered.values() for p in v.catalog.profiles)
        for name in names:
            print(clean(name))
    elif answered.answers:
        rows = [
            (a.cluster, a.value.catalog, a.value.availability, a.value.when)
            for a in answered.answers
        ]
        print(_render.clusters_profiles_table(rows))
    return _merged_exit(answered)


def _dump(model: BaseModel | None) -> object:
    return None if model is None else model.model_dump(mode="json")


def cmd_gpu_when(args: argparse.Namespace) -> int:
    with _client(args) as client:
        try:
            found = client.gpu.when(args.profile)
        except ValidationError as error:
            raise UsageError(flag_message(error, {"profile": "PROFILE"})) from None
    if args.json:
        print_json(found.model_dump(mode="json"))
    elif not found.profiles:
        print("No GPU profiles are configured.")
    else:
        print(_render.when_text(found))
    return EXIT_OK


def cmd_image_profiles(args: argparse.Namespace) -> int:
    _names_or_json(args)
    with _client(args) as client:
        catalog = client.capabilities().images
    if args.json:
        print_json(catalog.model_dump(mode="json"))
    elif args.quiet:
        for profile in catalog.profiles:
            print(clean(profile.name))
    elif not catalog.enabled:
        print("Image profiles are disabled on this Devboxes server.")
    elif not catalog.profiles:
        print("No image profiles are configured.")
    else:
        print(_render.images_table(catalog))
    return EXIT_OK


def cmd_gpu_doctor(args: argparse.Namespace) -> int:
    with _client(args) as client:
        report = client.gpu.doctor()
    if args.json:
        print_json(report.model_dump(mode="json"))
    else:
        print(_render.doctor_text(report))
    return EXIT_OK if report.ok else EXIT_ERROR


def _finish_wait(box: Devbox, args: argparse.Namespace, controller_url: str) -> Devbox:
    ready = _wait(box, args.timeout)
    _print_box(ready, args)
    if not args.json and ready.ssh_command:
        command = clean(ready.ssh_command)
        other = f"devbox ssh {ready.name}"
        print(f"\nConnect with: {command}" + (f"  (or: {other})" if command != other else ""))
    if not args.json and ready.state is DevboxState.READY:
        for link in _render.preview_links(ready, controller_url):
            print(f"Open its preview in a browser: {clean(link)}")
    return ready


def flag_message(error: ValidationError, flags: Mapping[str, str | None] = _CREATE_FLAGS) -> str:
    """A refused request in the words of the command line: ``--ttl must be at most 168
    hours`` for the API's ``ttl_hours``: ``must be at most 168``."""
    parts = []
    for item in error.errors:
        field = ".".join(str(part) for part in item.loc if part != "body")
        message = item.msg
        # A rule that says what the value must be reads on from the flag.
        separator = " " if message.startswith("must ") else ": "
        flag = flags.get(field, field)
        if flag in _FLAG_UNITS and (number := _TRAILING_NUMBER.search(message)):
            one, many = _FLAG_UNITS[flag]
            message += f" {one if number.group(1) == '1' else many}"
        parts.append(f"{flag}{separator}{message}" if flag else message)
    return "; ".join(parts)


def _note_retained_volume(client: Client, name: str) -> None:
    """Say when a create will pick up the home volume an earlier box of this name left."""
    try:
        volumes = client.volumes()
    except NotFound:
        # A server from before volume listing: the create still reuses the volume.
        return
    kept = next((volume for volume in volumes if volume.name == name), None)
    if kept is not None:
        size = f" ({kept.size})" if kept.size else ""
        print_error(
            f"note: reusing the retained home volume {kept.claim}{size} of an earlier {name}"
        )


def _choose_cluster(args: argparse.Namespace, gpu: bool | str | None) -> None:
    """The cluster a create goes to, said in one line when several are configured:
    with ``--cluster auto``, where the profile has a free device now, else where the box
    would be first in line soonest; without ``--cluster``, the default cluster."""
    auto = args.cluster == AUTO_CLUSTER
    if auto:
        args.cluster = None
    file = read_config(config_path()) if args.url is None else None
    if file is None or len(file.clusters) < 2 or os.environ.get(ENV_URL, "").strip():
        return
    if auto:
        with Clusters() as clusters:
            placement = clusters.place(gpu, args.preset)
        for line in placement.unasked:
            print_error(line)
        args.cluster = placement.cluster
        print_error(f"note: creating {args.name} on {placement.reason}")
    elif args.cluster is None and not os.environ.get(ENV_CLUSTER, "").strip():
        default = file.default_cluster or file.clusters[0].name
        print_error(
            f"note: creating {args.name} on {default}, the default cluster "
            f"(choose with NAME{CLUSTER_SEPARATOR}CLUSTER or --cluster {AUTO_CLUSTER})"
        )


def cmd_create(args: argparse.Namespace) -> int:
    if args.ssh and args.no_wait:
        raise UsageError("--ssh needs the box to be ready; drop --no-wait")
    gpu: bool | str | None = True if args.gpu else args.gpu_profile
    _choose_cluster(args, gpu)
    with _client(args) as client:
        if args.typed_name.strip() != args.name:
            print_error(f"note: using the name {args.name!r} (box names are lower case)")
        _note_retained_volume(client, args.name)
        try:
            box = client.create(
                args.name,
                preset=args.preset,
                ttl_hours=args.ttl,
                repository=args.repo,
                gpu=gpu,
                image=args.image,
            )
        except ValidationError as error:
            # Every field of a create comes from an option, so a refused rule is a bad
            # argument, whether the SDK or the server found it.
            raise UsageError(flag_message(error)) from None
        if args.no_wait:
            _print_box(box, args)
            return EXIT_OK
        ready = _finish_wait(box, args, client.url)
        if args.ssh:
            open_ssh(args, client, ready, [])
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    _names_or_json(args)
    clusters = _several(args)
    if clusters is not None:
        with clusters:
            found = clusters.list(state=args.state, profile=args.profile, owner=args.owner)
        return _clusters_boxes(args, found)
    with _client(args) as client:
        wanted = (("state", args.state), ("profile", args.profile), ("owner", args.owner))
        filters = {k: v for k, v in wanted if v}
        if args.json:
            print_json(client.request_json("GET", f"{API_PREFIX}/devboxes", params=filters))
            return EXIT_OK
        boxes = client.list(
            state=args.state, profile=args.profile, owner=args.owner, page_size=DEFAULT_PAGE_SIZE
        )
        if args.quiet:
            for box in boxes:
                print(box.name)
            return EXIT_OK
        if not boxes:
            print("No devboxes yet. Create one with: devbox create NAME")
            return EXIT_OK
        owners = _render.shows_owners(boxes, client.whoami())
    print(_render.boxes_table(boxes, _now(), owners=owners))
    return EXIT_OK


def _clusters_boxes(args: argparse.Namespace, answered: Answers[list[Devbox]]) -> int:
    located = [(a.cluster, box) for a in answered.answers for box in a.value]
    if args.json:
        items = [{**box.raw, "cluster": cluster} for cluster, box in located]
        print_json({"items": items, "errors": _json_errors(answered.errors)})
    elif args.quiet:
        for cluster, box in located:
            print(f"{box.name}{CLUSTER_SEPARATOR}{cluster}")
    elif located:
        boxes = [box for _, box in located]
        owners = any(box.owner != located[0][1].owner for box in boxes)
        table = _render.boxes_table(
            boxes, _now(), owners=owners, clusters=[cluster for cluster, _ in located]
        )
        print(table)
    elif answered.answers:
        print("No devboxes yet. Create one with: devbox create NAME")
    return _merged_exit(answered)


def cmd_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        box = client.get(args.name)
    if args.json:
        print_json(box.raw)
    else:
        print(_render.box_details(box, _now(), client.url))
    return EXIT_OK


def cmd_start(args: argparse.Namespace) -> int:
    with _client(args) as client:
        box = client.start(args.name)
        if args.no_wait:
            _print_box(box, args)
            return EXIT_OK
        _finish_wait(box, args, client.url)
        return EXIT_OK


def _holds_device(box: Devbox) -> bool:
    """Whether the box has a GPU placed on a node (not stopped, not waiting for one)."""
    return (
        box.gpu is not None
        and box.state is not DevboxState.STOPPED
        and box.scheduling_detail is None
        and box.pod_name is not None
    )


def _queue_note(client: Client, profile: str) -> str | None:
    """Who may take the device a stop frees: a box waiting for the same profile, or any
    other pod that asks for the device (Kubernetes picks, not the place in line)."""
    try:
        entry = client.gpu.availability().profile(profile)
    except DevboxesError:
        return None
    if entry is None or entry.waiting == 0:
        return None
    if entry.waiting == 1:
        return f"1 box is waiting for {profile}; it may take this GPU"
    return f"{entry.waiting} boxes are waiting for {profile}; one of them may take this GPU"


def cmd_stop(args: argparse.Namespace) -> int:
    with _client(args) as client:
        before = client.get(args.name)
        box = client.stop(args.name)
        note = (
            _queue_note(client, before.gpu.profile)
            if before.gpu is not None and _holds_device(before) and not args.json
            else None
        )
    _print_box(box, args)
    if not args.json:
        print(
            f"\nThe home volume of {box.name} is kept; start it again with: devbox start {box.name}"
        )
        if note is not None:
            print(clean(note))
    return EXIT_OK


def _confirm(name: str, warning: str, refused: str) -> None:
    """Ask for the box name to be typed before something that cannot be undone."""
    if not sys.stdin.isatty():
        raise UsageError(
            f"refusing to purge {name} without confirmation: stdin is not a terminal; "
            "pass --yes to purge anyway"
        )
    print(warning, file=sys.stderr)
    answer = input(f"Type the box name ({name}) to confirm: ")
    if answer.strip() != name:
        raise DevboxesError(f"confirmation did not match; {refused}")


def cmd_delete(args: argparse.Namespace) -> int:
    if args.purge and not args.yes:
        _confirm(
            args.name,
            f"This deletes {args.name} and its home volume. "
            "Files in the home volume cannot be recovered.",
            f"{args.name} was not deleted",
        )
    with _client(args) as client:
        if args.json:
            result = client.request_json(
                "DELETE",
                f"{API_PREFIX}/devboxes/{args.name}",
                params={"purge": "true" if args.purge else "false"},
            )
            print_json(result)
            return EXIT_OK
        deleted = client.delete(args.name, purge=args.purge)
    print(clean(deleted.message))
    return EXIT_OK


def cmd_extend(args: argparse.Namespace) -> int:
    with _client(args) as client:
        try:
            box = client.extend(args.name, args.hours)
        except ValidationError as error:
            raise UsageError(flag_message(error, _EXTEND_FLAGS)) from None
        except Conflict as error:
            # The box's deadline leaves less room than asked for: a refused --hours.
            if error.detail.startswith("hours "):
                raise UsageError(f"--{error.detail}") from None
            # Otherwise no --hours would do (a stopped box, one at the latest time
            # allowed); the server's sentence says why and what to do.
            raise DevboxesError(error.detail) from None
    _print_box(box, args)
    return EXIT_OK


def cmd_book(args: argparse.Namespace) -> int:
    with _client(args) as client:
        try:
            booking = client.bookings.create(args.profile, args.starts_at, args.hours, args.box)
        except ValidationError as error:
            raise UsageError(flag_message(error, _BOOK_FLAGS)) from None
    if args.json:
        print_json(booking.model_dump(mode="json"))
    else:
        print(f"{booking.name}: {clean(booking.message)}")
        print(f"Cancel with: devbox bookings cancel {booking.name}")
    return EXIT_OK


def cmd_bookings(args: argparse.Namespace) -> int:
    with _client(args) as client:
        try:
            bookings = client.bookings.list(args.profile)
        except ValidationError as error:
            raise UsageError(flag_message(error, {"profile": "--profile"})) from None
        owners = any(b.owner != client.whoami().user for b in bookings)
    if args.json:
        print_json([b.model_dump(mode="json") for b in bookings])
    elif not bookings:
        print("No bookings. Book a device with: devbox book PROFILE --at TIME --hours N")
    else:
        print(_render.bookings_table(bookings, owners))
    return EXIT_OK


def cmd_booking_cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        try:
            booking = client.bookings.cancel(args.booking)
        except ValidationError as error:
            raise UsageError(flag_message(error, {"name": "BOOKING"})) from None
    if args.json:
        print_json(booking.model_dump(mode="json"))
    else:
        print(f"{booking.name} cancelled: {clean(booking.message)}")
    return EXIT_OK


def _usage_span(args: argparse.Namespace) -> tuple[date | None, date | None]:
    """The first and last day asked for; None leaves a day to the server's clock."""
    since, until = args.since, args.until
    if isinstance(since, int):
        until = until or _now().date()
        since = until - timedelta(days=since - 1)
    if since is not None and until is not None and since > until:
        raise UsageError(f"--since {since.isoformat()} is after --until {until.isoformat()}")
    return since, until


def _usage_reports(
    client: Client, args: argparse.Namespace, since: date | None, until: date | None
) -> list[tuple[str, UsageReport]]:
    """The titled reports a table shows: the span asked for, or without one this week
    and this month, both ending on the server's today."""
    if since is not None or until is not None:
        report = client.usage(since, until, args.group_by, args.everyone)
        return [("", report)]
    week = client.usage(group_by=args.group_by, everyone=args.everyone)
    today = _render.last_day(week)
    month = client.usage(today.replace(day=1), today, args.group_by, args.everyone)
    return [("This week", week), ("This month", month)]


def cmd_usage(args: argparse.Namespace) -> int:
    if args.json and args.csv:
        raise UsageError("--json and --csv cannot be combined: give one")
    since, until = _usage_span(args)
    with _client(args) as client:
        try:
            if args.json:
                query = usage_query(since, until, args.group_by, args.everyone)
                print_json(client.request_json("GET", f"{API_PREFIX}/usage", params=query))
            elif args.csv:
                report = client.usage(since, until, args.group_by, args.everyone)
                sys.stdout.write(_render.usage_csv(report))
            else:
                print(_render.usage_text(_usage_reports(client, args, since, until)))
        except ValidationError as error:
            raise UsageError(flag_message(error, _USAGE_FLAGS)) from None
        except PermissionDenied as error:
            if not args.everyone:
                raise
            # The server names its query parameter; say it in the words of the command.
            raise PermissionDenied(
                error.status, "only admins may see everyone's usage; leave out --all for your own"
            ) from None
    return EXIT_OK


def cmd_volumes(args: argparse.Namespace) -> int:
    clusters = _several(args)
    if clusters is not None:
        with clusters:
            return _clusters_volumes(args, clusters.volumes())
    with _client(args) as client:
        if args.json:
            print_json(client.request_json("GET", f"{API_PREFIX}/volumes"))
            return EXIT_OK
        volumes = client.volumes()
        owners = bool(volumes) and _render.shows_owners(volumes, client.whoami())
    if not volumes:
        print("No retained home volumes.")
    else:
        print(_render.volumes_table(volumes, _now(), owners=owners))
        print("\nPurge one with: devbox volumes purge NAME (its files cannot be recovered)")
    return EXIT_OK


def _clusters_volumes(args: argparse.Namespace, answered: Answers[list[Volume]]) -> int:
    located = [(a.cluster, volume) for a in answered.answers for volume in a.value]
    if args.json:
        items = [{**v.model_dump(mode="json"), "cluster": c} for c, v in located]
        print_json({"items": items, "errors": _json_errors(answered.errors)})
    elif located:
        volumes = [volume for _, volume in located]
        owners = any(volume.owner != volumes[0].owner for volume in volumes)
        clusters = [cluster for cluster, _ in located]
        print(_render.volumes_table(volumes, _now(), owners=owners, clusters=clusters))
        print(
            f"\nPurge one with: devbox volumes purge NAME{CLUSTER_SEPARATOR}CLUSTER "
            "(its files cannot be recovered)"
        )
    elif answered.answers:
        print("No retained home volumes.")
    return _merged_exit(answered)


def cmd_keys(args: argparse.Namespace) -> int:
    with _client(args) as client:
        keys = client.keys.list()
        operator = not keys and not args.json and client.whoami().mode == OPERATOR_MODE
    if args.json:
        print_json([key.model_dump(mode="json") for key in keys])
    elif operator:
        # The server refuses keys for the operator token: point at where its keys live.
        print(
            "The operator token has no SSH keys of its own: the operator's boxes accept the "
            "keys of the Secret that the controller's ssh.authorizedKeysSecret names "
            "(devbox gpu doctor shows it). To keep keys of your own, log in as yourself: "
            "devbox login --oidc"
        )
    elif not keys:
        print("No SSH keys yet. Add one with: devbox keys add ~/.ssh/id_ed25519.pub")
    else:
        print(_render.keys_table(keys))
    return EXIT_OK


def _read_key(path: str) -> str:
    if path == "-":
        return sys.stdin.read(MAX_KEY_FILE_BYTES + 1)
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as file:
            text = file.read(MAX_KEY_FILE_BYTES + 1)
    except OSError as err:
        raise UsageError(f"cannot read {path}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a text file; give the .pub file of a key") from None
    if "PRIVATE KEY" in text:
        raise UsageError(f"{path} is a private key; give its .pub file and keep this one secret")
    return text


def cmd_key_add(args: argparse.Namespace) -> int:
    text = _read_key(args.file)
    with _client(args) as client:
        key = client.keys.add(text)
    if args.json:
        print_json(key.model_dump(mode="json"))
    else:
        print(f"Added {key.fingerprint} ({key.algorithm}); your boxes accept it within seconds.")
    return EXIT_OK


def cmd_key_remove(args: argparse.Namespace) -> int:
    with _client(args) as client:
        key = client.keys.remove(args.fingerprint)
    if args.json:
        print_json(key.model_dump(mode="json"))
    else:
        print(f"Removed {key.fingerprint}.")
    return EXIT_OK


def cmd_volume_purge(args: argparse.Namespace) -> int:
    if not args.yes:
        _confirm(
            args.name,
            f"This deletes the home volume of {args.name}. Its files cannot be recovered.",
            f"the home volume of {args.name} was not deleted",
        )
    with _client(args) as client:
        result = client.purge_volume(args.name)
    if args.json:
        print_json(result.model_dump())
    else:
        print(clean(result.message))
    return EXIT_OK


def _ssh_environment(args: argparse.Namespace, client: Client) -> dict[str, str]:
    """ssh's environment: the ``ProxyCommand`` it runs must reach the same API as this
    command, with the token given here (which never goes on a command line)."""
    environment = {**os.environ, ENV_URL: client.url}
    if args.token is not None:
        environment[ENV_TOKEN] = normalize_token(args.token, "--token")
    return environment


def _host_cluster(args: argparse.Namespace) -> str | None:
    """The cluster a box's ssh host name carries (``NAME.CLUSTER.devbox``): the one the
    command acts on, when the configuration file has several."""
    return None if args.url is not None else chosen_cluster(args.cluster)


def open_ssh(
    args: argparse.Namespace, client: Client, box: Devbox, extra: Sequence[str]
) -> NoReturn:
    """Replace this process with ssh to a ready box: through the controller's tunnel when
    it offers one, else at the box's own address."""
    cluster = _host_cluster(args)
    if "tunnel" in client.capabilities().ssh_access:
        argv = _cli_ssh.tunnel_argv(box, extra, cluster)
    else:
        argv = _cli_ssh.service_argv(box, extra, cluster)
    _cli_ssh.exec_ssh(argv, _ssh_environment(args, client))


def cmd_ssh(args: argparse.Namespace) -> int:
    if args.stdio:
        if args.ssh_args:
            raise UsageError("--stdio takes no ssh arguments: ssh runs it as a ProxyCommand")
        return ssh_stdio(args.url, args.token, args.name)
    with _client(args) as client:
        box = client.get(args.name)
        if box.state is not DevboxState.READY:
            raise not_ready(box)
        open_ssh(args, client, box, args.ssh_args)


def cmd_config_ssh(args: argparse.Namespace) -> int:
    path = Path(args.file).expanduser()
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, UnicodeDecodeError) as error:
        raise DevboxesError(f"cannot read {path}: {error}") from None
    if args.remove:
        updated = _cli_ssh.without_block(text)
        done = (
            f"removed the devbox block from {path}"
            if updated != text
            else f"{path} has no devbox block"
        )
    else:
        with _client(args) as client:
            if "tunnel" not in client.capabilities().ssh_access:
                raise DevboxesError(
                    f"the controller at {client.url} offers no tunnel; "
                    "reach boxes with: devbox ssh NAME"
                )
            clusters = _tunnel_clusters(args)
            updated = _cli_ssh.with_block(text, _cli_ssh.config_block(client.url, clusters))
        done = f"wrote the devbox block to {path}: connect with ssh NAME{HOST_SUFFIX}"
        if clusters:
            names = ", ".join(name for name, _ in clusters)
            done += f", or ssh NAME.CLUSTER{HOST_SUFFIX} for {names}"
    if args.dry_run:
        sys.stdout.write(updated)
        return EXIT_OK
    if updated != text:
        try:
            _cli_ssh.write_config(path, updated)
        except OSError as error:
            raise DevboxesError(f"cannot write {path}: {error.strerror or error}") from None
    print(done)
    return EXIT_OK


def _tunnel_clusters(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The configured clusters whose controllers offer the tunnel, with their URLs; each
    of the others is one line."""
    clusters = _several(args)
    if clusters is None:
        return []
    with clusters:
        found = clusters.ask(lambda c: c.url if "tunnel" in c.capabilities().ssh_access else None)
    _merged_exit(found)
    for answer in found.answers:
        if answer.value is None:
            print_error(f"{answer.cluster}: offers no tunnel; reach its boxes with devbox ssh")
    return [(a.cluster, a.value) for a in found.answers if a.value is not None]


def cmd_known_hosts(args: argparse.Namespace) -> int:
    return known_hosts(args.url, args.token, args.host)


def cmd_port_forward(args: argparse.Namespace) -> int:
    port, local = args.ports
    with _client(args) as client:
        if "tunnel" not in client.capabilities().ssh_access:
            raise DevboxesError(
                f"the controller at {client.url} offers no tunnel; forward with: "
                f"devbox ssh {args.name} -- -N -L {local}:127.0.0.1:{port}"
            )
        box = client.get(args.name)
        if box.state is not DevboxState.READY:
            raise not_ready(box)
        print_error(
            f"forwarding http://127.0.0.1:{local} to port {port} of {box.name} through the "
            "controller; Ctrl-C stops it"
        )
        argv = _cli_ssh.forward_argv(box, port, local, _host_cluster(args))
        _cli_ssh.exec_ssh(argv, _ssh_environment(args, client))
