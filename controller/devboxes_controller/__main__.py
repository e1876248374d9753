"""``devboxes-controller``: ``serve`` the API and reconciler, ``check-config`` a file, or
check the cluster's GPU prerequisites with ``doctor``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devboxes_sdk.models import DoctorReport

from .config.loading import CHART_VALUES, CheckTarget, load_check_target, load_settings
from .config.settings import Settings
from .config.violations import ConfigError
from .k8s.lease import DEFAULT_LEASE_SECONDS

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line; ``extra`` fields become keys. Nothing secret is ever passed."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def _configure_logging(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)


def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def _address(listen: tuple[str, int]) -> str:
    host, port = listen
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _lease_seconds(value: str) -> int:
    if not value.isdigit() or not 2 <= int(value) <= 60:
        raise argparse.ArgumentTypeError(f"expected whole seconds from 2 to 60, got {value!r}")
    return int(value)


def check_config(path: Path) -> int:
    try:
        settings = load_check_target(path).settings
    except ConfigError as err:
        print(f"{path}: {len(err.violations)} problem(s):", file=sys.stderr)
        for violation in err.violations:
            print(f"  {violation}", file=sys.stderr)
        return 1
    gpu = settings.gpu
    state = (
        f"GPU enabled, {len(gpu.profiles)} profile(s), default {gpu.default_profile}"
        if gpu.enabled
        else "GPU disabled"
    )
    print(f"{path}: valid ({state})")
    return 0


def doctor_source(path: Path | None, target: CheckTarget, release_namespace: str | None) -> str:
    """One line naming the kind of file the doctor read and the box namespace it checks,
    with where that namespace came from when the values file leaves it to the release."""
    if target.source != CHART_VALUES:
        read = f"read settings file {path}" if path is not None else "no file, default settings"
        return f"{read}; boxes in namespace {target.settings.namespace}"
    namespace = target.settings.namespace
    if not target.namespace_from_release:
        ignored = " (--namespace is used only when it is empty)" if release_namespace else ""
        where = f"namespace {namespace} from controller.namespace{ignored}"
    elif release_namespace is not None:
        where = f"namespace {namespace}, the release namespace (controller.namespace is empty)"
    else:
        where = (
            f"namespace {namespace} assumed: controller.namespace is empty, so the chart "
            "uses the release namespace; name it with --namespace"
        )
    return f"read chart values file {path}; boxes in {where}"


def doctor_json(report: DoctorReport, target: CheckTarget) -> str:
    """The report with the kind of file read and the box namespace checked, which only
    this command has: the API's DoctorReport comes from the controller's own settings."""
    found = report.model_dump(mode="json")
    return json.dumps(
        {**found, "source": target.source, "namespace": target.settings.namespace}, indent=2
    )


def doctor(args: argparse.Namespace) -> int:
    """The GPU doctor without a running controller: exit 1 on any failed check, 2 when the
    settings or credentials are unusable or the apiserver cannot be asked."""
    from devboxes_sdk._render import doctor_text

    from .k8s import kube
    from .placement.doctor import examine

    try:
        target = load_check_target(args.settings, os.environ, args.namespace)
    except ConfigError as err:
        print("devboxes-controller: invalid settings:", file=sys.stderr)
        for violation in err.violations:
            print(f"  {violation}", file=sys.stderr)
        return 2
    if args.namespace is not None and target.source != CHART_VALUES:
        read = f"{args.settings} is a settings file" if args.settings else "no file was given"
        print(
            "devboxes-controller: doctor: --namespace names the Helm release namespace of a "
            f"chart values file, but {read}: set namespace in the settings file, or "
            "DEVBOXES_NAMESPACE",
            file=sys.stderr,
        )
        return 2
    print(
        f"devboxes-controller: doctor: {doctor_source(args.settings, target, args.namespace)}",
        file=sys.stderr,
    )
    try:
        api = kube.api_client(args.kubeconfig)
    except Exception as err:  # noqa: BLE001 - any kubeconfig problem is reported in one line
        print(f"devboxes-controller: cannot load Kubernetes credentials: {err}", file=sys.stderr)
        return 2
    try:
        report = examine(target.settings, api)
    except kube.ApiProblem as err:
        print(f"devboxes-controller: doctor: {err.detail}", file=sys.stderr)
        return 2
    if args.json:
        print(doctor_json(report, target))
    else:
        print(doctor_text(report))
    return 0 if report.ok else 1


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .box.activity import activity_key
    from .control.bookings import Desk, Keeper
    from .control.budgets import BudgetKeeper
    from .control.gates import Gatekeeper
    from .control.lifecycle import Lifecycle
    from .control.mount_retry import MountRetry
    from .control.reconciler import Reconciler
    from .control.usage import Recorder
    from .k8s import kube
    from .k8s.cluster_id import ClusterId
    from .k8s.lease import LeaderElector
    from .k8s.probe import ApiserverProbe
    from .state.availability import Availability
    from .state.ended_sessions import SharedEndedSessions
    from .state.line import DeviceLine
    from .state.store import BoxStore
    from .state.watches import MOUNT_REPORTS, PODS, USAGE, Watches
    from .web.app import create_app
    from .web.connections import allow_open_files, server_options
    from .web.identity.base import Verifier
    from .web.identity.hub import hub_verifier
    from .web.identity.oidc import oidc_verifier
    from .web.identity.operator_token import TokenError, load_token
    from .web.probes import ServerWithProbes, probe_socket
    from .web.readiness import Readiness

    try:
        settings = load_settings(args.settings, os.environ)
        token = load_token(args.token_file)
    except ConfigError as err:
        print("devboxes-controller: invalid settings:", file=sys.stderr)
        for violation in err.violations:
            print(f"  {violation}", file=sys.stderr)
        return 1
    except TokenError as err:
        print(f"devboxes-controller: {err}", file=sys.stderr)
        return 1
    probe_listener = None
    if args.probe_listen is not None:
        try:
            probe_listener = probe_socket(*args.probe_listen)
        except OSError as err:
            print(
                f"devboxes-controller: cannot serve the probes on {_address(args.probe_listen)}: "
                # The reason alone: create_server's message repeats the address.
                f"{os.strerror(err.errno) if err.errno else err}",
                file=sys.stderr,
            )
            return 1
    _configure_logging(args.log_level)
    try:
        api = kube.api_client(args.kubeconfig)
    except Exception as err:  # noqa: BLE001 - any kubeconfig problem is reported in one line
        print(f"devboxes-controller: cannot load Kubernetes credentials: {err}", file=sys.stderr)
        return 1
    # Every watch once (state.watches), shared by the store and availability.
    watches = Watches(settings, api)
    line = DeviceLine()
    availability = Availability(settings, watches, line)
    store = BoxStore(settings, watches, availability, line)
    lifecycle = Lifecycle(store, api, activity_key=activity_key(token))
    probe = ApiserverProbe(api)
    # Read apart from every request; the capabilities give it once it is known.
    cluster = ClusterId(api)
    ended = SharedEndedSessions(settings.namespace, api)
    readiness = Readiness(probe, store, ended)
    identity = args.identity or f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
    elector = LeaderElector(
        api,
        settings.namespace,
        identity,
        args.lease_seconds,
        can_lead=lambda: readiness.problem() is None,
    )
    reconciler = Reconciler(store, lifecycle, elector)
    gatekeeper = Gatekeeper(store, api, elector, lifecycle.promises)
    mount_retry = MountRetry(
        api, settings.namespace, watches[MOUNT_REPORTS], watches[PODS], elector
    )
    keeper = Keeper(store, Desk(lifecycle), elector, lifecycle)
    recorder = Recorder(store, store.usage, api, elector)
    budget_keeper = BudgetKeeper(store, lifecycle, elector, watches[USAGE])
    # People with a token of the configured OpenID Connect issuer or JupyterHub, beside
    # the operator.
    oidc = oidc_verifier(settings)
    hub = hub_verifier(settings)
    verifiers: list[Verifier] = [v for v in (oidc, hub) if v is not None]

    async def background() -> AsyncIterator[None]:
        probe.start()
        cluster.start()
        watches.start()
        availability.start()
        ended.start()
        elector.start()
        reconciler.start()
        gatekeeper.start()
        mount_retry.start()
        keeper.start()
        recorder.start()
        budget_keeper.start()
        try:
            yield
        finally:
            budget_keeper.stop()
            recorder.stop()
            keeper.stop()
            mount_retry.stop()
            gatekeeper.stop()
            reconciler.stop()
            stopper = threading.Thread(target=elector.stop)
            stopper.start()
            stopper.join(timeout=6)
            ended.stop()
            availability.stop()
            watches.stop()
            lifecycle.stop()
            probe.stop()
            cluster.stop()
            for verifier in verifiers:
                await verifier.aclose()

    app = create_app(
        store, lifecycle, token, readiness, ended, background, verifiers=verifiers, cluster=cluster
    )
    host, port = args.listen
    log = logging.getLogger(__name__)
    log.info(
        "starting",
        extra={
            "namespace": settings.namespace,
            "listen": _address(args.listen),
            "probe_listen": None if probe_listener is None else _address(args.probe_listen),
            "identity": identity,
            "gpu_enabled": settings.gpu.enabled,
            "cluster_name": settings.cluster.name,
            "oidc_issuer": oidc.issuer if oidc is not None else None,
            "hub": None if hub is None else hub.api_url,
        },
    )
    connections = settings.connections
    open_files = allow_open_files(connections)
    if open_files is not None:
        log.warning(
            "the open-file limit is below connections.maxTotal: past it new connections "
            "fail instead of being refused",
            extra={"open_files": open_files, "max_total": connections.max_total},
        )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
        **server_options(connections),
    )
    if probe_listener is None:
        uvicorn.Server(config).run()
    else:
        ServerWithProbes(config, readiness.problem, probe_listener).run()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="devboxes-controller", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check-config", help="validate a settings or Helm values file")
    check.add_argument("file", type=Path)
    run = commands.add_parser("serve", help="serve the API and reconcile boxes")
    check_gpu = commands.add_parser(
        "doctor",
        help="check the cluster's GPU prerequisites; exit 1 when any check fails",
    )
    for command, readable in (
        (run, "settings file (YAML or JSON)"),
        (check_gpu, "settings file (YAML or JSON) or the Helm chart's values file"),
    ):
        command.add_argument(
            "--settings",
            type=Path,
            default=os.environ.get("DEVBOXES_SETTINGS"),
            help=f"{readable}; env DEVBOXES_SETTINGS",
        )
        command.add_argument(
            "--kubeconfig",
            default=os.environ.get("KUBECONFIG"),
            help="kubeconfig; default in-cluster credentials, then ~/.kube/config",
        )
    check_gpu.add_argument(
        "--namespace",
        help="the Helm release namespace (helm -n), where the chart puts the boxes when the "
        "values file leaves controller.namespace empty; without it "
        f"{Settings.model_fields['namespace'].default} is assumed",
    )
    check_gpu.add_argument("--json", action="store_true", help="print the report as JSON")
    run.add_argument(
        "--listen",
        type=_listen,
        default=_listen(os.environ.get("DEVBOXES_LISTEN", "127.0.0.1:8080")),
        help="HOST:PORT to serve on; env DEVBOXES_LISTEN (default 127.0.0.1:8080)",
    )
    run.add_argument(
        "--probe-listen",
        type=_listen,
        default=os.environ.get("DEVBOXES_PROBE_LISTEN") or None,
        help="HOST:PORT on which to serve only /health and /ready, for the kubelet's probes, "
        "apart from the API's connection limits; env DEVBOXES_PROBE_LISTEN (default: none, "
        "the probes are served with the API only)",
    )
    run.add_argument(
        "--token-file",
        type=Path,
        help="file holding the operator token; default env DEVBOXES_TOKEN",
    )
    run.add_argument(
        "--lease-seconds",
        type=_lease_seconds,
        default=DEFAULT_LEASE_SECONDS,
        help="leader election lease duration: how long a dead leader blocks takeover "
        f"(default {DEFAULT_LEASE_SECONDS})",
    )
    run.add_argument("--identity", help="this replica's name in the Lease (default hostname)")
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)
    if args.command == "serve" and args.probe_listen and args.probe_listen[1] == args.listen[1]:
        run.error(f"--probe-listen needs a port of its own, not the API's ({args.listen[1]})")
    if args.command == "check-config":
        return check_config(args.file)
    if args.command == "doctor":
        return doctor(args)
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
