"""``devbox``: the command line for Devboxes, built on the SDK.

Exit codes: 0 success, 1 error, 2 usage error, 3 the box was not ready in time,
4 the box is degraded, 130 interrupted.
"""

from __future__ import annotations

import argparse
import getpass
import io
import json
import os
import re
import shutil
import sys
import threading
import webbrowser
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, NoReturn, TextIO

from devboxes_sdk import _render, oidc_login
from devboxes_sdk._completion import (
    BOXES,
    IMAGES,
    PROFILES,
    SHELLS,
    complete_with,
    completion_script,
)
from devboxes_sdk._version import __version__
from devboxes_sdk.client import DEFAULT_PAGE_SIZE, Client, Devbox
from devboxes_sdk.config import (
    ENV_TOKEN,
    ENV_URL,
    config_path,
    normalize_token,
    normalize_url,
    read_config,
    write_config,
)
from devboxes_sdk.errors import (
    ApiError,
    AuthenticationError,
    BoxDegraded,
    BoxStopped,
    ConfigurationError,
    Conflict,
    DevboxesError,
    NotADevboxesServer,
    NotConfigured,
    NotFound,
    PermissionDenied,
    StartTimeout,
    Unavailable,
    ValidationError,
)
from devboxes_sdk.labels import status_line
from devboxes_sdk.models import (
    API_PREFIX,
    PRESETS,
    DevboxState,
    GpuAvailability,
    normalize_name,
    normalize_repository,
)

# A .pub file is one line; anything much longer is not one.
MAX_KEY_FILE_BYTES = 16384
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 3
EXIT_DEGRADED = 4
EXIT_INTERRUPTED = 130

DEFAULT_WAIT_TIMEOUT = 600.0
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
_FLAG_UNITS = {"--ttl": ("hour", "hours")}
_TRAILING_NUMBER = re.compile(r"\b(\d+)$")

_NOT_CONFIGURED = {
    "url": f"no Devboxes URL configured: run 'devbox login --url URL' or set {ENV_URL}",
    "token": f"no Devboxes token configured: run 'devbox login' or set {ENV_TOKEN}",
}


class UsageError(Exception):
    """The command line is well-formed for argparse but cannot be carried out as given."""


class _BadCommandLine(UsageError):
    """A command line argparse refused; ``prog`` is the (sub)command that refused it."""

    def __init__(self, prog: str, message: str) -> None:
        self.prog = prog
        super().__init__(message)


class _Parser(argparse.ArgumentParser):
    """Reports a usage error as one line and where to find help, not the usage block."""

    def error(self, message: str) -> NoReturn:
        raise _BadCommandLine(self.prog, message)


def _usage_text(prog: str, message: str) -> str:
    return f"{prog}: error: {_render.clean(message)}\nRun '{prog} --help' for usage.\n"


# -- argument types -----------------------------------------------------------------


def _box_name(value: str) -> str:
    try:
        return normalize_name(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


class _NewBoxName(argparse.Action):
    """Stores the checked name and, as ``typed_name``, what was typed, so that a create
    can say when the name it uses differs from the one given."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        typed = str(values)
        try:
            name = normalize_name(typed)
        except ValueError as error:
            raise argparse.ArgumentError(self, str(error)) from None
        setattr(namespace, self.dest, name)
        namespace.typed_name = typed


def _repository(value: str) -> str | None:
    try:
        return normalize_repository(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def _positive_seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not 0 < number < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value}")
    return number


# -- parser -------------------------------------------------------------------------


def _global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Add --url/--token/--json; on subcommands they default to SUPPRESS so that
    ``devbox --json list`` and ``devbox list --json`` both work."""
    default: Any = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--url", default=default, help=f"Devboxes API URL (default: ${ENV_URL} or the config file)"
    )
    parser.add_argument(
        "--token",
        default=default,
        help="API token (default: $DEVBOX_TOKEN or the config file; prefer those, "
        "command lines are visible to other local users)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="print the server's JSON instead of tables",
    )


def _box_argument(parser: argparse.ArgumentParser) -> None:
    """The NAME of an existing box, completed from the server's list."""
    complete_with(parser.add_argument("name", type=_box_name, metavar="NAME"), BOXES)


def _wait_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-wait", action="store_true", help="return at once instead of waiting until ready"
    )
    parser.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=DEFAULT_WAIT_TIMEOUT,
        metavar="S",
        help=f"seconds to wait for the box to be ready (default {DEFAULT_WAIT_TIMEOUT:g})",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="devbox",
        description="Persistent SSH development boxes, with GPUs, on Devboxes.",
        epilog="exit codes: 0 ok, 1 error, 2 usage, 3 not ready in time, 4 degraded, "
        "130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"devbox {__version__}")
    _global_options(parser, suppress=False)
    common = _Parser(add_help=False)
    _global_options(common, suppress=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, help_text: str, handler: Callable[[argparse.Namespace], int]) -> Any:
        sub = commands.add_parser(name, help=help_text, description=help_text, parents=[common])
        sub.set_defaults(handler=handler, prog=sub.prog)
        return sub

    login = add("login", "check a URL and token and save them to the config file", _cmd_login)
    login.add_argument(
        "--oidc",
        action="store_true",
        help="log in through the server's identity provider in a browser instead of giving a token",
    )
    login.add_argument(
        "--no-browser",
        action="store_true",
        help="with --oidc: print the URL to open instead of opening a browser",
    )
    login.add_argument(
        "--device",
        action="store_true",
        help="with --oidc: log in from a browser anywhere with a one-time code (for SSH "
        "sessions and remote terminals)",
    )
    add("whoami", "show who the token belongs to", _cmd_whoami)

    gpu = commands.add_parser(
        "gpu", help="GPU catalog", description="GPU catalog", parents=[common]
    )
    gpu_commands = gpu.add_subparsers(dest="gpu_command", metavar="COMMAND", required=True)
    profiles = gpu_commands.add_parser(
        "profiles",
        help="list the GPU profiles you can ask for",
        description="list the GPU profiles you can ask for",
        parents=[common],
    )
    profiles.add_argument("-q", "--quiet", action="store_true", help="print profile names only")
    profiles.set_defaults(handler=_cmd_gpu_profiles, prog=profiles.prog)
    doctor = gpu_commands.add_parser(
        "doctor",
        help="check the cluster's GPU prerequisites (operator)",
        description="check every prerequisite of every GPU profile on the cluster; "
        "exits 1 when any check fails",
        parents=[common],
    )
    doctor.set_defaults(handler=_cmd_gpu_doctor, prog=doctor.prog)

    image = commands.add_parser(
        "image", help="image profiles", description="image profiles", parents=[common]
    )
    image_commands = image.add_subparsers(dest="image_command", metavar="COMMAND", required=True)
    image_profiles = image_commands.add_parser(
        "profiles",
        help="list the image profiles you can create a box with",
        description="list the image profiles you can create a box with",
        parents=[common],
    )
    image_profiles.add_argument(
        "-q", "--quiet", action="store_true", help="print profile names only"
    )
    image_profiles.set_defaults(handler=_cmd_image_profiles, prog=image_profiles.prog)

    create = add("create", "create a box and wait until it is ready", _cmd_create)
    create.add_argument("name", action=_NewBoxName, metavar="NAME")
    create.add_argument(
        "--preset", choices=PRESETS, default="small", help="box size (default small)"
    )
    create.add_argument(
        "--ttl",
        type=_positive_int,
        default=24,
        metavar="HOURS",
        help="stop the box automatically after this many hours (default 24)",
    )
    create.add_argument(
        "--repo", type=_repository, metavar="REPOSITORY", help="owner/repo or GitHub https URL"
    )
    accelerator = create.add_mutually_exclusive_group()
    accelerator.add_argument(
        "--gpu", action="store_true", help="attach the operator's default GPU profile"
    )
    complete_with(
        accelerator.add_argument(
            "--gpu-profile", metavar="PROFILE", help="attach this GPU profile"
        ),
        PROFILES,
    )
    complete_with(
        create.add_argument(
            "--image",
            metavar="PROFILE",
            help="create the box with this image profile (see: devbox image profiles)",
        ),
        IMAGES,
    )
    _wait_options(create)
    create.add_argument("--ssh", action="store_true", help="open an SSH session once ready")

    listing = add("list", "list your boxes, newest first", _cmd_list)
    listing.add_argument("-q", "--quiet", action="store_true", help="print box names only")
    listing.add_argument(
        "--state", choices=[state.value for state in DevboxState], help="only boxes in this state"
    )
    complete_with(
        listing.add_argument(
            "--profile", metavar="PROFILE", help="only boxes of this GPU profile, or 'cpu'"
        ),
        PROFILES,
    )
    listing.add_argument(
        "--owner", metavar="USER", help="only this person's boxes (admins; others see their own)"
    )

    status = add("status", "show every detail of one box", _cmd_status)
    _box_argument(status)

    start = add("start", "start a stopped box (renews its auto-stop time)", _cmd_start)
    _box_argument(start)
    _wait_options(start)

    stop = add("stop", "stop a box; its home volume is kept", _cmd_stop)
    _box_argument(stop)

    delete = add("delete", "delete a box (its home volume is kept unless --purge)", _cmd_delete)
    _box_argument(delete)
    delete.add_argument(
        "--purge", action="store_true", help="also delete the home volume, permanently"
    )
    delete.add_argument(
        "--yes", action="store_true", help="do not ask for confirmation before purging"
    )

    extend = add(
        "extend", "push a running box's auto-stop time back, without a restart", _cmd_extend
    )
    _box_argument(extend)
    extend.add_argument(
        "--hours", type=_positive_int, required=True, metavar="N", help="hours to add"
    )

    volumes = add("volumes", "list home volumes kept after their box was deleted", _cmd_volumes)
    volume_commands = volumes.add_subparsers(dest="volume_command", metavar="COMMAND")
    purge = volume_commands.add_parser(
        "purge",
        help="delete a retained home volume, permanently",
        description="delete a retained home volume, permanently",
        parents=[common],
    )
    purge.add_argument("name", type=_box_name, metavar="NAME")
    purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    purge.set_defaults(handler=_cmd_volume_purge, prog=purge.prog)

    keys = add("keys", "list your SSH public keys, which all your boxes accept", _cmd_keys)
    key_commands = keys.add_subparsers(dest="key_command", metavar="COMMAND")
    key_add = key_commands.add_parser(
        "add",
        help="add a public key: a .pub file, or - for standard input",
        description="add a public key: a .pub file, or - for standard input",
        parents=[common],
    )
    key_add.add_argument("file", metavar="FILE", help="e.g. ~/.ssh/id_ed25519.pub, or -")
    key_add.set_defaults(handler=_cmd_key_add, prog=key_add.prog)
    key_remove = key_commands.add_parser(
        "remove",
        help="remove a key by its fingerprint (see: devbox keys)",
        description="remove a key by its fingerprint (see: devbox keys)",
        parents=[common],
    )
    key_remove.add_argument("fingerprint", metavar="FINGERPRINT", help="SHA256:... as listed")
    key_remove.set_defaults(handler=_cmd_key_remove, prog=key_remove.prog)

    ssh = add("ssh", "open an SSH session to a ready box", _cmd_ssh)
    _box_argument(ssh)
    ssh.add_argument(
        "ssh_args", nargs=argparse.REMAINDER, metavar="-- ARGS", help="passed on to ssh"
    )

    completion = commands.add_parser(
        "completion",
        help="print a shell completion script",
        description="print a shell completion script; e.g. source <(devbox completion bash)",
    )
    completion.add_argument("shell", choices=SHELLS)
    completion.set_defaults(handler=_cmd_completion, prog=completion.prog)
    return parser


# -- helpers ------------------------------------------------------------------------


def _client(args: argparse.Namespace) -> Client:
    """A client for the URL and token of the command line, environment or config file,
    with problems explained in terms of this command's options."""
    url: str | None = args.url
    if url is not None:
        try:
            url = normalize_url(url)
        except ConfigurationError as error:
            raise ConfigurationError(f"{error} (from --url)") from None
    token = None if args.token is None else normalize_token(args.token, "--token")
    try:
        return Client(url, token)
    except NotConfigured as error:
        raise ConfigurationError(_NOT_CONFIGURED[error.setting]) from None


def _now() -> datetime:
    return datetime.now(UTC)


def _print_json(data: object) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def _print_box(box: Devbox, args: argparse.Namespace) -> None:
    if args.json:
        _print_json(box.raw)
    else:
        print(_render.boxes_table([box], _now()))


class Progress:
    """Shows a box's way to ready on a stream: a live spinner on a terminal, otherwise
    one line per change of state or message."""

    _UNICODE_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
    _ASCII_FRAMES = "|/-\\"
    _INTERVAL = 0.1

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
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
        if not self._live:
            self._text = line
            print(line, file=self._stream, flush=True)
            return
        with self._lock:
            self._text = line
        if self._thread is None:
            self._thread = threading.Thread(target=self._spin, name="devbox-spinner", daemon=True)
            self._thread.start()

    def _spin(self) -> None:
        frame = 0
        while True:
            with self._lock:
                text = f"{self._frames[frame % len(self._frames)]} {self._text}"
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


def ssh_argv(box: Devbox, extra: Sequence[str]) -> list[str]:
    """The ``ssh`` command line for a box, from its ssh_host, ssh_port and ssh_user."""
    destination = box.ssh_host
    if not destination or not _SSH_HOST_RE.fullmatch(destination):
        raise DevboxesError(f"{box.name} has no usable SSH address yet")
    if box.ssh_user is not None:
        if not _SSH_USER_RE.fullmatch(box.ssh_user):
            raise DevboxesError(f"{box.name} names an unusable SSH user: {box.ssh_user!r}")
        destination = f"{box.ssh_user}@{destination}"
    extra_args = list(extra)
    if extra_args and extra_args[0] == "--":
        extra_args = extra_args[1:]
    return ["ssh", "-p", str(box.ssh_port), destination, *extra_args]


def _exec_ssh(box: Devbox, extra: Sequence[str]) -> NoReturn:
    argv = ssh_argv(box, extra)
    executable = shutil.which("ssh")
    if executable is None:
        raise DevboxesError("ssh is not installed (no 'ssh' on PATH)")
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(executable, argv)  # noqa: S606 - replacing this process with ssh is the point
    except OSError as error:
        raise DevboxesError(f"cannot run {executable}: {error.strerror}") from None


def _not_ready(box: Devbox) -> DevboxesError:
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


def _cmd_login(args: argparse.Namespace) -> int:
    url = args.url or os.environ.get(ENV_URL) or read_config(config_path()).url
    if not url:
        raise UsageError("login needs --url URL, the address of your Devboxes server")
    url = normalize_url(url)
    if args.oidc:
        return _oidc_login(args, url)
    if args.no_browser or args.device:
        raise UsageError(f"{'--device' if args.device else '--no-browser'} goes with --oidc")
    raw_token = args.token if args.token is not None else _read_token(url)
    token = normalize_token(raw_token, "--token" if args.token is not None else "the prompt")
    with Client(url, token) as client:
        me = client.whoami()
    path = config_path()
    write_config(path, url, token)
    if args.json:
        _print_json({"url": url, "user": me.user, "mode": me.mode, "config": str(path)})
    else:
        print(f"Logged in to {url} as {_render.clean(me.user)}.")
        print(f"Configuration saved to {path} (readable only by you).")
    return EXIT_OK


def _oidc_login(args: argparse.Namespace, url: str) -> int:
    if args.token is not None:
        raise UsageError("--oidc and --token cannot be combined: --oidc gets the token")

    def show(authorize_url: str) -> None:
        # The URL holds no secret: a PKCE challenge and a state, both of this login only.
        print("Open this URL to log in:", file=sys.stderr)
        print(f"  {authorize_url}", file=sys.stderr, flush=True)

    def show_code(page: str, code: str, filled_in: str | None) -> None:
        # The issuer wrote these: shown without any terminal control characters.
        clean = _render.clean
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
    path = config_path()
    write_config(path, url, result.token)
    groups = ", ".join(_render.clean(g) for g in result.groups) or "none"
    if args.json:
        _print_json(
            {
                "url": url,
                "user": result.user,
                "mode": "oidc",
                "groups": list(result.groups),
                "config": str(path),
            }
        )
    else:
        print(f"Logged in to {url} as {_render.clean(result.user)} (oidc; groups: {groups}).")
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


def _cmd_whoami(args: argparse.Namespace) -> int:
    with _client(args) as client:
        if args.json:
            _print_json(client.request_json("GET", f"{API_PREFIX}/whoami"))
            return EXIT_OK
        me = client.whoami()
    print(f"{_render.clean(me.user)} ({_render.clean(me.mode)}) at {client.url}")
    if me.groups:
        print(f"groups: {', '.join(_render.clean(group) for group in me.groups)}")
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


def _cmd_gpu_profiles(args: argparse.Namespace) -> int:
    _names_or_json(args)
    with _client(args) as client:
        catalog = client.capabilities().gpu
        availability = _availability(client) if catalog.enabled and not args.quiet else None
    if args.json:
        data = catalog.model_dump(mode="json")
        if availability is not None:
            data["availability"] = availability.model_dump(mode="json")
        _print_json(data)
    elif args.quiet:
        for profile in catalog.profiles:
            print(_render.clean(profile.name))
    elif not catalog.enabled:
        print("GPU acceleration is disabled on this Devboxes server.")
    elif not catalog.profiles:
        print("No GPU profiles are configured.")
    else:
        print(_render.profiles_table(catalog, availability))
    return EXIT_OK


def _cmd_image_profiles(args: argparse.Namespace) -> int:
    _names_or_json(args)
    with _client(args) as client:
        catalog = client.capabilities().images
    if args.json:
        _print_json(catalog.model_dump(mode="json"))
    elif args.quiet:
        for profile in catalog.profiles:
            print(_render.clean(profile.name))
    elif not catalog.enabled:
        print("Image profiles are disabled on this Devboxes server.")
    elif not catalog.profiles:
        print("No image profiles are configured.")
    else:
        print(_render.images_table(catalog))
    return EXIT_OK


def _cmd_gpu_doctor(args: argparse.Namespace) -> int:
    with _client(args) as client:
        report = client.gpu.doctor()
    if args.json:
        _print_json(report.model_dump(mode="json"))
    else:
        print(_render.doctor_text(report))
    return EXIT_OK if report.ok else EXIT_ERROR


def _finish_wait(box: Devbox, args: argparse.Namespace) -> int:
    ready = _wait(box, args.timeout)
    _print_box(ready, args)
    if not args.json and ready.ssh_command:
        print(f"\nConnect with: {_render.clean(ready.ssh_command)}  (or: devbox ssh {ready.name})")
    return EXIT_OK


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
        _error(f"note: reusing the retained home volume {kept.claim}{size} of an earlier {name}")


def _cmd_create(args: argparse.Namespace) -> int:
    if args.ssh and args.no_wait:
        raise UsageError("--ssh needs the box to be ready; drop --no-wait")
    gpu: bool | str | None = True if args.gpu else args.gpu_profile
    with _client(args) as client:
        if args.typed_name.strip() != args.name:
            _error(f"note: using the name {args.name!r} (box names are lower case)")
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
        _finish_wait(box, args)
    if args.ssh:
        _exec_ssh(box, [])
    return EXIT_OK


def _cmd_list(args: argparse.Namespace) -> int:
    _names_or_json(args)
    with _client(args) as client:
        wanted = (("state", args.state), ("profile", args.profile), ("owner", args.owner))
        filters = {k: v for k, v in wanted if v}
        if args.json:
            _print_json(client.request_json("GET", f"{API_PREFIX}/devboxes", params=filters))
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


def _cmd_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        box = client.get(args.name)
    if args.json:
        _print_json(box.raw)
    else:
        print(_render.box_details(box, _now()))
    return EXIT_OK


def _cmd_start(args: argparse.Namespace) -> int:
    with _client(args) as client:
        box = client.start(args.name)
        if args.no_wait:
            _print_box(box, args)
            return EXIT_OK
        return _finish_wait(box, args)


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


def _cmd_stop(args: argparse.Namespace) -> int:
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
            print(_render.clean(note))
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


def _cmd_delete(args: argparse.Namespace) -> int:
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
            _print_json(result)
            return EXIT_OK
        deleted = client.delete(args.name, purge=args.purge)
    print(_render.clean(deleted.message))
    return EXIT_OK


def _cmd_extend(args: argparse.Namespace) -> int:
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


def _cmd_volumes(args: argparse.Namespace) -> int:
    with _client(args) as client:
        if args.json:
            _print_json(client.request_json("GET", f"{API_PREFIX}/volumes"))
            return EXIT_OK
        volumes = client.volumes()
        owners = bool(volumes) and _render.shows_owners(volumes, client.whoami())
    if not volumes:
        print("No retained home volumes.")
    else:
        print(_render.volumes_table(volumes, _now(), owners=owners))
        print("\nPurge one with: devbox volumes purge NAME (its files cannot be recovered)")
    return EXIT_OK


def _cmd_keys(args: argparse.Namespace) -> int:
    with _client(args) as client:
        keys = client.keys.list()
        operator = not keys and not args.json and client.whoami().mode == OPERATOR_MODE
    if args.json:
        _print_json([key.model_dump(mode="json") for key in keys])
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


def _cmd_key_add(args: argparse.Namespace) -> int:
    text = _read_key(args.file)
    with _client(args) as client:
        key = client.keys.add(text)
    if args.json:
        _print_json(key.model_dump(mode="json"))
    else:
        print(f"Added {key.fingerprint} ({key.algorithm}); your boxes accept it within seconds.")
    return EXIT_OK


def _cmd_key_remove(args: argparse.Namespace) -> int:
    with _client(args) as client:
        key = client.keys.remove(args.fingerprint)
    if args.json:
        _print_json(key.model_dump(mode="json"))
    else:
        print(f"Removed {key.fingerprint}.")
    return EXIT_OK


def _cmd_volume_purge(args: argparse.Namespace) -> int:
    if not args.yes:
        _confirm(
            args.name,
            f"This deletes the home volume of {args.name}. Its files cannot be recovered.",
            f"the home volume of {args.name} was not deleted",
        )
    with _client(args) as client:
        result = client.purge_volume(args.name)
    if args.json:
        _print_json(result.model_dump())
    else:
        print(_render.clean(result.message))
    return EXIT_OK


def _cmd_ssh(args: argparse.Namespace) -> int:
    with _client(args) as client:
        box = client.get(args.name)
    if box.state is not DevboxState.READY:
        raise _not_ready(box)
    _exec_ssh(box, args.ssh_args)


def _cmd_completion(args: argparse.Namespace) -> int:
    sys.stdout.write(completion_script(build_parser(), args.shell))
    return EXIT_OK


# -- entry point --------------------------------------------------------------------


def _error(message: str) -> None:
    print(_render.clean(message), file=sys.stderr)


def _timed_out(error: StartTimeout) -> list[str]:
    box = error.box
    status = status_line(box.state, _render.progress_reason(box))
    # The box stays queued: without a cancel hint it would take a GPU hours later, unused.
    gpu = ", and takes a GPU as soon as one is free" if box.gpu else ""
    return [
        f"{box.name} was not ready within {error.timeout:g}s ({status})",
        f"It keeps starting on the server{gpu}; full reason: devbox status {box.name}",
        f"To cancel: devbox stop {box.name} (keeps the box) "
        f"or devbox delete {box.name} (keeps its home volume)",
    ]


# The "kind" of a --json error, for scripts to branch on; the first class that matches
# names it (docs/cli.md lists them).
_ERROR_KINDS: tuple[tuple[type[BaseException], str], ...] = (
    (UsageError, "usage"),
    (StartTimeout, "timeout"),
    (BoxDegraded, "degraded"),
    (BoxStopped, "stopped"),
    (NotADevboxesServer, "not_a_devboxes_server"),
    (AuthenticationError, "unauthenticated"),
    (PermissionDenied, "forbidden"),
    (NotFound, "not_found"),
    (Conflict, "conflict"),
    (ValidationError, "invalid"),
    (Unavailable, "unavailable"),
    (ApiError, "api"),
    (ConfigurationError, "configuration"),
    (EOFError, "no_input"),
    (KeyboardInterrupt, "interrupted"),
)


def _failure(error: BaseException) -> tuple[int, list[str]]:
    """The exit code for ``error`` and the lines that explain it to a person."""
    if isinstance(error, StartTimeout):
        return EXIT_TIMEOUT, _timed_out(error)
    if isinstance(error, BoxDegraded):
        return EXIT_DEGRADED, [str(error), f"Details: devbox status {error.box.name}"]
    if isinstance(error, NotADevboxesServer):
        hint = (
            f"Set it with --url, {ENV_URL} or 'devbox login --url URL': "
            "the address where the Devboxes dashboard opens."
        )
        return EXIT_ERROR, [str(error), hint]
    if isinstance(error, UsageError):
        return EXIT_USAGE, [str(error)]
    if isinstance(error, EOFError):
        return EXIT_ERROR, ["no input; aborted"]
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED, ["interrupted"]
    return EXIT_ERROR, [str(error)]


def _report(error: BaseException, prog: str, as_json: bool) -> int:
    """Explain ``error`` on stderr, or with --json as one JSON object on stdout, so that
    a script reads every answer from stdout; the exit code is the same either way."""
    code, lines = _failure(error)
    if as_json:
        message, status = "\n".join(lines), None
        if isinstance(error, ApiError):
            status = error.status
            if not isinstance(error, NotADevboxesServer):
                # The status has its own field: the detail without "API returned <status>".
                message = error.detail
        kind = next((k for cls, k in _ERROR_KINDS if isinstance(error, cls)), "error")
        _print_json({"error": {"kind": kind, "message": message, "status": status}})
    elif isinstance(error, UsageError):
        sys.stderr.write(_usage_text(prog, lines[0]))
    else:
        for line in lines:
            _error(line)
    return code


def _asks_for_json(argv: Sequence[str]) -> bool:
    """Whether a command line that argparse refused asked for --json (before any ``--``,
    after which the words are ssh's)."""
    words = list(argv)
    return "--json" in words[: words.index("--")] if "--" in words else "--json" in words


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    prog, as_json = parser.prog, _asks_for_json(words)
    try:
        args = parser.parse_args(words)
        prog, as_json = args.prog, getattr(args, "json", False)
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    except _BadCommandLine as error:
        return _report(error, error.prog, as_json)
    except (DevboxesError, UsageError, EOFError) as error:
        return _report(error, prog, as_json)
    except KeyboardInterrupt as error:
        if not as_json:
            # Past the spinner's line or the prompt.
            print(file=sys.stderr)
        return _report(error, prog, as_json)
    except BrokenPipeError:
        # The reader went away (e.g. `devbox list | head`); stay quiet about it.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
