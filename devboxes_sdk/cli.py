"""``devbox``: the command line for Devboxes, built on the SDK.

Exit codes: 0 success, 1 error, 2 usage error, 3 the box was not ready in time,
4 the box is degraded, 130 interrupted.

ssh runs ``devbox ssh --stdio HOST`` and ``devbox known-hosts HOST`` on every login, so
importing this module loads only :mod:`devboxes_sdk._cli_base`; those two command lines,
as ssh gives them, run from there, and so does ``devbox ssh NAME [-- ARGS]`` of a box
ready behind the tunnel. Every other one loads the parser and the client.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from devboxes_sdk._cli_base import (
    EXIT_DEGRADED,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    BadCommandLine,
    UsageError,
    box_name,
    clean,
    known_hosts,
    print_error,
    print_json,
    ssh_if_ready,
    ssh_stdio,
)
from devboxes_sdk.config import ENV_URL
from devboxes_sdk.errors import (
    ApiError,
    AuthenticationError,
    BoxDegraded,
    BoxStopped,
    ConfigurationError,
    Conflict,
    DevboxesError,
    NotADevboxesServer,
    NotFound,
    PermissionDenied,
    StartTimeout,
    Unavailable,
    ValidationError,
)

if TYPE_CHECKING:
    import argparse


def _usage_text(prog: str, message: str) -> str:
    return f"{prog}: error: {clean(message)}\nRun '{prog} --help' for usage.\n"


def _timed_out(error: StartTimeout) -> list[str]:
    from devboxes_sdk import _render
    from devboxes_sdk.labels import status_line

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
        print_json({"error": {"kind": kind, "message": message, "status": status}})
    elif isinstance(error, UsageError):
        sys.stderr.write(_usage_text(prog, lines[0]))
    else:
        for line in lines:
            print_error(line)
    return code


def _asks_for_json(argv: Sequence[str]) -> bool:
    """Whether a command line that argparse refused asked for --json (before any ``--``,
    after which the words are ssh's)."""
    words = list(argv)
    return "--json" in words[: words.index("--")] if "--" in words else "--json" in words


def _lean(words: Sequence[str]) -> tuple[str, Callable[[], int]] | None:
    """The (sub)command and the run of a command line ssh gives on every login, exactly
    as ``proxy_command`` and ``known_hosts_command`` write it, which needs no parser;
    None for every other command line (options, help, a name the parser refuses, ...),
    which the parser reads and explains."""
    match list(words):
        case ["ssh", "--stdio", host]:
            try:
                name = box_name(host)
            except ValueError:
                return None
            return "devbox ssh", lambda: ssh_stdio(None, None, name)
        case ["known-hosts", host] if not host.startswith("-"):
            return "devbox known-hosts", lambda: known_hosts(None, None, host)
    return None


class _Run:
    """One command line's run: the (sub)command that answers for its failures, and
    whether it asked for them as JSON; both are known better once it is parsed."""

    def __init__(self, prog: str, as_json: bool) -> None:
        self.prog = prog
        self.as_json = as_json

    def __call__(self, body: Callable[[], int]) -> int:
        """``body``'s exit code, or that of the failure it raised, explained."""
        try:
            return body()
        except BadCommandLine as error:
            return _report(error, error.prog, self.as_json)
        except (DevboxesError, UsageError, EOFError) as error:
            return _report(error, self.prog, self.as_json)
        except KeyboardInterrupt as error:
            if not self.as_json:
                # Past the spinner's line or the prompt.
                print(file=sys.stderr)
            return _report(error, self.prog, self.as_json)
        except BrokenPipeError:
            # The reader went away (e.g. `devbox list | head`); stay quiet about it.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")
    words = sys.argv[1:] if argv is None else list(argv)
    match words:
        case ["ssh", host, *extra] if not host.startswith("-") and extra[:1] in ([], ["--"]):
            try:
                name = box_name(host)
            except ValueError:
                pass
            else:
                # Returns only when the box is not ready behind the tunnel, or ssh cannot start.
                ssh_if_ready(name, extra)
    lean = _lean(words)
    if lean is not None:
        prog, body = lean
        return _Run(prog, as_json=False)(body)
    # The whole grammar, and with it the client, requests and pydantic.
    from devboxes_sdk._cli_commands import settle_cluster
    from devboxes_sdk._cli_parser import build_parser

    parser = build_parser()
    run = _Run(parser.prog, _asks_for_json(words))

    def parsed() -> int:
        args = parser.parse_args(words)
        run.prog, run.as_json = args.prog, getattr(args, "json", False)
        handler: Callable[[argparse.Namespace], int] = args.handler
        settle_cluster(args)
        return handler(args)

    return run(parsed)


if __name__ == "__main__":
    sys.exit(main())
