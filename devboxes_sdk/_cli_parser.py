"""The ``devbox`` command line's grammar: its commands, options and argument checks, which
the completion scripts are generated from too."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any, NoReturn

from devboxes_sdk._cli_base import EXIT_OK, BadCommandLine, box_name
from devboxes_sdk._cli_commands import (
    cmd_book,
    cmd_booking_cancel,
    cmd_bookings,
    cmd_config_ssh,
    cmd_create,
    cmd_delete,
    cmd_extend,
    cmd_gpu_doctor,
    cmd_gpu_profiles,
    cmd_gpu_when,
    cmd_image_profiles,
    cmd_key_add,
    cmd_key_remove,
    cmd_keys,
    cmd_known_hosts,
    cmd_list,
    cmd_login,
    cmd_port_forward,
    cmd_ssh,
    cmd_start,
    cmd_status,
    cmd_stop,
    cmd_usage,
    cmd_volume_purge,
    cmd_volumes,
    cmd_whoami,
)
from devboxes_sdk._completion import (
    BOXES,
    IMAGES,
    PROFILES,
    SHELLS,
    complete_with,
    completion_script,
)
from devboxes_sdk._version import __version__
from devboxes_sdk.config import (
    AUTO_CLUSTER,
    CLUSTER_NAME_RE,
    CLUSTER_NAME_RULE,
    CLUSTER_SEPARATOR,
    ENV_CLUSTER,
    ENV_URL,
)
from devboxes_sdk.models import (
    MAX_USAGE_DAYS,
    PRESETS,
    USAGE_GROUP_BYS,
    DevboxState,
    normalize_name,
    normalize_repository,
)

DEFAULT_WAIT_TIMEOUT = 600.0


class _Parser(argparse.ArgumentParser):
    """Reports a usage error as one line and where to find help, not the usage block."""

    def error(self, message: str) -> NoReturn:
        raise BadCommandLine(self.prog, message)


# -- argument types -----------------------------------------------------------------


def _box_name(value: str) -> str:
    """An existing box's name; ``NAME.devbox``, as ssh and the config block name a box,
    names box NAME; ``NAME@CLUSTER`` names it on that cluster."""
    name, separator, cluster = value.partition(CLUSTER_SEPARATOR)
    try:
        checked = box_name(name)
        return checked + (separator + _cluster_name(cluster) if separator else "")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _cluster_name(value: str) -> str:
    if not CLUSTER_NAME_RE.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a cluster name: {CLUSTER_NAME_RULE}")
    return value


def _cluster_choice(value: str) -> str:
    """A configured cluster's name, or ``auto`` (create only)."""
    return value if value == AUTO_CLUSTER else _cluster_name(value)


_OFFSET = re.compile(r"^\+(\d{1,4})([mhd])$")
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})$")
MOMENT_FORMS = "now, +30m, +2h, +1d, 14:00 (the next one), or 2030-05-17 09:00 (local time)"


def moment(text: str, now: datetime) -> datetime:
    """A time as typed: relative to ``now``, the next time of day on the local clock, or a
    date and time (local unless it names its zone)."""
    value = text.strip()
    if value == "now":
        return now
    offset = _OFFSET.match(value)
    if offset:
        unit = {"m": "minutes", "h": "hours", "d": "days"}[offset.group(2)]
        return now + timedelta(**{unit: int(offset.group(1))})
    clock = _CLOCK.match(value)
    if clock:
        hour, minute = int(clock.group(1)), int(clock.group(2))
        if hour > 23 or minute > 59:
            raise argparse.ArgumentTypeError(f"{text!r} is not a time of day")
        local = now.astimezone()
        found = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
        return found if found > local else found + timedelta(days=1)
    try:
        found = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time; give {MOMENT_FORMS}") from None
    return found if found.tzinfo is not None else found.astimezone()


def _moment(text: str) -> datetime:
    return moment(text, datetime.now(UTC))


_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_LAST_DAYS = re.compile(r"^(\d{1,4})d$")


def _day(text: str) -> date:
    """A UTC day as ``YYYY-MM-DD``, the only form a usage report's days are given in."""
    value = text.strip()
    if _DAY.fullmatch(value):
        try:
            return date.fromisoformat(value)
        except ValueError:
            # The form of a date, not one: 2026-13-01, 2026-02-30.
            pass
    raise argparse.ArgumentTypeError(f"{text!r} is not a date; give YYYY-MM-DD (a UTC day)")


def _first_day(text: str) -> date | int:
    """A day, or ``Nd``: the last N days, counted back from --until (or today) and
    including it, as the number N."""
    last = _LAST_DAYS.fullmatch(text.strip())
    if last is None:
        try:
            return _day(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a date; give YYYY-MM-DD (a UTC day) or a number of days, as 7d"
            ) from None
    days = int(last.group(1))
    if not 1 <= days <= MAX_USAGE_DAYS:
        raise argparse.ArgumentTypeError(
            f"a report covers 1 to {MAX_USAGE_DAYS} days, got {text!r}"
        )
    return days


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
        typed, separator, cluster = str(values).partition(CLUSTER_SEPARATOR)
        try:
            name = normalize_name(typed)
            if separator:
                name += separator + _cluster_name(cluster)
        except (ValueError, argparse.ArgumentTypeError) as error:
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


def _port_pair(value: str) -> tuple[int, int]:
    """``PORT`` or ``PORT:LOCAL``, each from 1 to 65535."""
    parts = value.split(":")
    if len(parts) > 2:
        raise argparse.ArgumentTypeError(f"expected PORT or PORT:LOCAL, got {value!r}")
    numbers = []
    for part in parts:
        if not (part.isascii() and part.isdigit()) or not 1 <= int(part) <= 65535:
            raise argparse.ArgumentTypeError(
                f"a port is a whole number from 1 to 65535, got {part!r} in {value!r}"
            )
        numbers.append(int(part))
    return numbers[0], numbers[-1]


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
    parser.add_argument(
        "--cluster",
        type=_cluster_choice,
        default=default,
        metavar="CLUSTER",
        help=f"the configured cluster to ask (default: ${ENV_CLUSTER}, else every cluster "
        "for list, volumes and gpu profiles, else the default cluster); create takes "
        f"{AUTO_CLUSTER}: where the GPU profile has a free device",
    )


def _box_argument(parser: argparse.ArgumentParser) -> None:
    """The NAME of an existing box, completed from the server's list."""
    complete_with(parser.add_argument("name", type=_box_name, metavar="NAME"), BOXES)
    parser.set_defaults(existing_box=True)


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

    def add(
        name: str,
        help_text: str,
        handler: Callable[[argparse.Namespace], int],
        group: Any = commands,
        description: str | None = None,
    ) -> Any:
        """A (sub)command of ``group`` run by ``handler``; ``description`` is what its own
        help says, when more than ``help_text``."""
        sub = group.add_parser(
            name, help=help_text, description=description or help_text, parents=[common]
        )
        sub.set_defaults(handler=handler, prog=sub.prog)
        return sub

    login = add("login", "check a URL and token and save them to the config file", cmd_login)
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
    add("whoami", "show who the token belongs to", cmd_whoami)

    gpu = commands.add_parser(
        "gpu", help="GPU catalog", description="GPU catalog", parents=[common]
    )
    gpu_commands = gpu.add_subparsers(dest="gpu_command", metavar="COMMAND", required=True)
    profiles = add(
        "profiles", "list the GPU profiles you can ask for", cmd_gpu_profiles, gpu_commands
    )
    profiles.add_argument("-q", "--quiet", action="store_true", help="print profile names only")
    when = add(
        "when",
        "say when a new box of a GPU profile would get a device",
        cmd_gpu_when,
        gpu_commands,
        "say when a new box of each GPU profile (or of PROFILE) would get a device, as "
        "things stand: now, by a time at the latest, an estimate, or unknown, with the reason",
    )
    when.add_argument("profile", nargs="?", metavar="PROFILE", help="only this GPU profile")
    add(
        "doctor",
        "check the cluster's GPU prerequisites (operator)",
        cmd_gpu_doctor,
        gpu_commands,
        "check every prerequisite of every GPU profile on the cluster; exits 1 when any "
        "check fails",
    )

    image = commands.add_parser(
        "image", help="image profiles", description="image profiles", parents=[common]
    )
    image_commands = image.add_subparsers(dest="image_command", metavar="COMMAND", required=True)
    image_profiles = add(
        "profiles",
        "list the image profiles you can create a box with",
        cmd_image_profiles,
        image_commands,
    )
    image_profiles.add_argument(
        "-q", "--quiet", action="store_true", help="print profile names only"
    )

    create = add("create", "create a box and wait until it is ready", cmd_create)
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

    listing = add("list", "list your boxes, newest first", cmd_list)
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

    status = add("status", "show every detail of one box", cmd_status)
    _box_argument(status)

    start = add("start", "start a stopped box (renews its auto-stop time)", cmd_start)
    _box_argument(start)
    _wait_options(start)

    stop = add("stop", "stop a box; its home volume is kept", cmd_stop)
    _box_argument(stop)

    delete = add("delete", "delete a box (its home volume is kept unless --purge)", cmd_delete)
    _box_argument(delete)
    delete.add_argument(
        "--purge", action="store_true", help="also delete the home volume, permanently"
    )
    delete.add_argument(
        "--yes", action="store_true", help="do not ask for confirmation before purging"
    )

    extend = add(
        "extend", "push a running box's auto-stop time back, without a restart", cmd_extend
    )
    _box_argument(extend)
    extend.add_argument(
        "--hours", type=_positive_int, required=True, metavar="N", help="hours to add"
    )

    volumes = add("volumes", "list home volumes kept after their box was deleted", cmd_volumes)
    volume_commands = volumes.add_subparsers(dest="volume_command", metavar="COMMAND")
    purge = add(
        "purge", "delete a retained home volume, permanently", cmd_volume_purge, volume_commands
    )
    purge.add_argument("name", type=_box_name, metavar="NAME")
    purge.set_defaults(existing_box=True)
    purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    keys = add("keys", "list your SSH public keys, which all your boxes accept", cmd_keys)
    key_commands = keys.add_subparsers(dest="key_command", metavar="COMMAND")
    key_add = add(
        "add", "add a public key: a .pub file, or - for standard input", cmd_key_add, key_commands
    )
    key_add.add_argument("file", metavar="FILE", help="e.g. ~/.ssh/id_ed25519.pub, or -")
    key_remove = add(
        "remove", "remove a key by its fingerprint (see: devbox keys)", cmd_key_remove, key_commands
    )
    key_remove.add_argument("fingerprint", metavar="FINGERPRINT", help="SHA256:... as listed")

    book = add(
        "book",
        "book one device of a GPU profile for a window; refused with the earliest window "
        "that fits when this one does not",
        cmd_book,
    )
    complete_with(book.add_argument("profile", metavar="PROFILE"), PROFILES)
    book.add_argument(
        "--at", dest="starts_at", type=_moment, required=True, metavar="TIME", help=MOMENT_FORMS
    )
    book.add_argument("--hours", type=_positive_int, required=True, metavar="N")
    book.add_argument(
        "--box",
        type=_box_name,
        metavar="NAME",
        help="the box of yours that gets the device first (default: any of yours of PROFILE)",
    )
    bookings = add("bookings", "list your bookings (an admin's: everyone's)", cmd_bookings)
    bookings.add_argument("--profile", metavar="PROFILE", help="only this GPU profile's")
    booking_commands = bookings.add_subparsers(dest="booking_command", metavar="COMMAND")
    cancel = add(
        "cancel",
        "cancel a booking; it keeps nothing from now",
        cmd_booking_cancel,
        booking_commands,
    )
    cancel.add_argument("booking", metavar="BOOKING", help="its name, as listed: bk-...")

    usage = add(
        "usage",
        "show the GPU hours you used: allocated, busy, idle, and waited for",
        cmd_usage,
        description="show GPU usage over whole UTC days, per profile by default: hours "
        "allocated (device-hours), busy, idle and unknown, the busy share of the known hours, "
        "and hours waited for a device; without --since or --until, this week (the last 7 "
        "days) and this month (since the 1st)",
    )
    usage.add_argument(
        "--all",
        dest="everyone",
        action="store_true",
        help="everyone's usage rather than your own (admins)",
    )
    usage.add_argument(
        "--since",
        type=_first_day,
        metavar="DAY",
        help="the first UTC day, YYYY-MM-DD; or 7d, 30d: the last days up to --until",
    )
    usage.add_argument(
        "--until", type=_day, metavar="DAY", help="the last UTC day, YYYY-MM-DD (default today)"
    )
    usage.add_argument(
        "--group-by",
        choices=USAGE_GROUP_BYS,
        default="profile",
        help="what each line adds up (default profile)",
    )
    usage.add_argument(
        "--csv",
        action="store_true",
        help="print one CSV line per group, seconds and hours, instead of tables",
    )

    ssh = add("ssh", "open an SSH session to a ready box", cmd_ssh)
    _box_argument(ssh)
    ssh.add_argument(
        "--stdio",
        action="store_true",
        help="carry one SSH connection over standard input and output through the "
        "controller, as ssh's ProxyCommand (NAME may end in .devbox)",
    )
    ssh.add_argument(
        "ssh_args", nargs=argparse.REMAINDER, metavar="-- ARGS", help="passed on to ssh"
    )

    port_forward = add(
        "port-forward",
        "reach a port of a ready box (a web preview, a notebook server) on this machine's "
        "loopback, through the controller",
        cmd_port_forward,
    )
    _box_argument(port_forward)
    port_forward.add_argument(
        "ports",
        type=_port_pair,
        metavar="PORT[:LOCAL]",
        help="the box's port, and the local one (default: the same number)",
    )

    known_hosts = add(
        "known-hosts",
        "print the host keys the controller publishes for a box, as known_hosts lines "
        "(ssh's KnownHostsCommand)",
        cmd_known_hosts,
    )
    known_hosts.add_argument(
        "host", metavar="HOST", help="the box's name, or NAME.devbox as ssh names it"
    )

    config_ssh = add(
        "config-ssh",
        "let ssh, scp, rsync and editors reach every box as NAME.devbox through the "
        "controller, with one marked block in the SSH config",
        cmd_config_ssh,
    )
    config_ssh.add_argument(
        "--file",
        default="~/.ssh/config",
        metavar="PATH",
        help="the SSH config to edit (default: ~/.ssh/config)",
    )
    config_ssh.add_argument(
        "--dry-run", action="store_true", help="print the config it would write; change nothing"
    )
    config_ssh.add_argument(
        "--remove", action="store_true", help="remove the block and nothing else"
    )

    completion = commands.add_parser(
        "completion",
        help="print a shell completion script",
        description="print a shell completion script; e.g. source <(devbox completion bash)",
    )
    completion.add_argument("shell", choices=SHELLS)
    completion.set_defaults(handler=_cmd_completion, prog=completion.prog)
    return parser


def _cmd_completion(args: argparse.Namespace) -> int:
    sys.stdout.write(completion_script(build_parser(), args.shell))
    return EXIT_OK
