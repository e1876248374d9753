"""The Jupyter server extension: configuration traits and route registration."""

from __future__ import annotations

import asyncio
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from jupyter_server.extension.application import ExtensionApp
from traitlets import Bool, Float, Int, TraitError, Unicode, validate
from traitlets.config import Config

from devboxes_jupyter import release
from devboxes_jupyter.client_factory import ClientFactory, ClusterSet
from devboxes_jupyter.handlers import (
    CLUSTERS_SETTING,
    EXECUTOR_SETTING,
    FACTORY_SETTING,
    WATCHER_SETTING,
    routes,
)
from devboxes_jupyter.kernelspecs import write_kernelspecs
from devboxes_jupyter.provisioner import NO_KEY, DevboxKernelProvisioner, key_problem
from devboxes_jupyter.watcher import Watcher
from devboxes_sdk.client import Client
from devboxes_sdk.clusters import DEFAULT_CLUSTER_TIMEOUT
from devboxes_sdk.config import (
    ENV_CLUSTER,
    ENV_TOKEN,
    ENV_TOKEN_FILE,
    ENV_URL,
    config_path,
    read_config,
    resolve,
)
from devboxes_sdk.errors import ConfigurationError, DevboxesError

# Long enough for a refused call and its retries; a server that stops never waits longer.
WATCHER_STOP_SECONDS = 10.0
TOKEN_COPY = "devboxes-token"  # noqa: S105 - a file name, not a secret
# What a JupyterHub gives the single-user servers it starts: their person's token.
HUB_TOKEN_ENV = "JUPYTERHUB_API_TOKEN"  # noqa: S105 - a variable's name, not a secret


def kernel_problem(config: Config) -> str | None:
    """Why a devbox kernel cannot start on this server, or None.

    Checked as a kernel's start checks it: the provisioner's key setting as this server's
    configuration gives it, and the controller as ``Client()`` finds it in this process
    (after the export to kernels). Without a key setting, kernels make their own key,
    which only a person's token can add: the controller says whose the token is. A tile
    that can only fail is better not offered.
    """
    key_file = DevboxKernelProvisioner(config=config).ssh_key_file
    problem = key_problem(key_file)
    if problem is not None:
        return problem
    try:
        resolve()
    except ConfigurationError as error:
        return f"no Devboxes controller for them: {error}"
    if key_file:
        return None
    try:
        mode = Client().whoami().mode
    except DevboxesError as error:
        return f"the controller could not say whose its token is: {error}"
    return NO_KEY if mode == "operator" else None


class DevboxesJupyterApp(ExtensionApp):
    """Serves ``/devboxes/api/`` for the launcher panel, backed by one Devboxes controller,
    or by every cluster of the SDK's configuration file when it lists several.

    Configure it as ``c.DevboxesJupyterApp.<trait>`` in ``jupyter_server_config.py``
    or on the command line. Empty traits fall back to ``DEVBOX_URL`` /
    ``DEVBOX_TOKEN`` and then to the SDK's configuration file.
    """

    name = "devboxes_jupyter"
    load_other_extensions = True

    controller_url = Unicode(
        "",
        help="Base URL of the Devboxes controller, e.g. https://devboxes.example.com. "
        "Empty: DEVBOX_URL, then the SDK configuration file.",
    ).tag(config=True)

    dashboard_url = Unicode(
        "",
        help="The controller's address as people's browsers reach it, for the sidebar's "
        "links that open a box's web preview on the dashboard. Empty: the controller URL "
        "this server uses.",
    ).tag(config=True)

    token = Unicode(
        "",
        help="Bearer token for the controller. It stays on the server: it is never sent "
        "to the browser. Empty: token_file, then DEVBOX_TOKEN, then the SDK configuration file.",
    ).tag(config=True)

    token_file = Unicode(
        "",
        help="File holding the controller token (read on every request, so rotation "
        "needs no restart). Used when token is empty.",
    ).tag(config=True)

    hub_token = Bool(
        False,
        help="In a JupyterHub single-user server: present this person's own hub token "
        "(JUPYTERHUB_API_TOKEN) to the controller instead of an operator token, so that the "
        "controller knows who asks (its auth.hub names the hub). token and token_file stay "
        "empty.",
    ).tag(config=True)

    request_timeout = Float(
        30.0,
        help="Seconds to wait for the controller on each request (a server-side wait "
        "gets its own wait time on top).",
    ).tag(config=True)

    cluster_timeout = Float(
        DEFAULT_CLUSTER_TIMEOUT,
        help="With several clusters in the SDK configuration file: seconds that a listing "
        "of them all waits for each cluster; one that does not answer in time is one line "
        "of the sidebar, never a wait for the others.",
    ).tag(config=True)

    max_workers = Int(
        8,
        help="Threads that carry controller calls, so that slow calls and server-side "
        "waits never block Jupyter's event loop.",
    ).tag(config=True)

    poll_interval = Float(
        5.0,
        help="Seconds between two listings of the boxes while a browser shows the "
        "Devboxes sidebar (at least 2). All browsers share one listing.",
    ).tag(config=True)

    devbox_kernels = Bool(
        True,
        help='Offer the kernelspecs "Python 3 on <profile> (devbox)", whose kernels run '
        "inside a box of that profile (configure c.DevboxKernelProvisioner.ssh_key_file).",
    ).tag(config=True)

    kernel_python = Unicode(
        "python3",
        help="Interpreter on the box that runs ipykernel for devbox kernels.",
    ).tag(config=True)

    @validate("poll_interval")
    def _check_poll_interval(self, proposal: dict[str, float]) -> float:
        value = proposal["value"]
        if not value >= 2:
            raise TraitError("poll_interval must be at least 2 seconds")
        return value

    @validate("request_timeout")
    def _check_timeout(self, proposal: dict[str, float]) -> float:
        value = proposal["value"]
        if not value > 0:
            raise TraitError("request_timeout must be a positive number of seconds")
        return value

    @validate("cluster_timeout")
    def _check_cluster_timeout(self, proposal: dict[str, float]) -> float:
        value = proposal["value"]
        if not value > 0:
            raise TraitError("cluster_timeout must be a positive number of seconds")
        return value

    @validate("max_workers")
    def _check_workers(self, proposal: dict[str, int]) -> int:
        value = proposal["value"]
        if value < 1:
            raise TraitError("max_workers must be at least 1")
        return value

    def _person_token(self) -> str:
        """This person's hub token, when hub_token asks for it."""
        if self.token or self.token_file:
            raise ConfigurationError(
                "hub_token presents this person's hub token: leave token and token_file empty"
            )
        token = os.environ.get(HUB_TOKEN_ENV, "").strip()
        if not token:
            raise ConfigurationError(
                f"hub_token is set but {HUB_TOKEN_ENV} is not: this server was not started "
                "by a JupyterHub"
            )
        return token

    def _several_clusters(self) -> ClusterSet | None:
        """The clusters to serve when the SDK configuration file lists several and nothing
        names one controller (no URL, token or hub token here, no ``DEVBOX_URL`` or
        ``DEVBOX_CLUSTER``), as the ``devbox`` CLI decides; else None."""
        if self.hub_token or self.controller_url.strip() or self.token or self.token_file:
            return None
        if any(os.environ.get(key, "").strip() for key in (ENV_URL, ENV_CLUSTER)):
            return None
        try:
            configured = read_config(config_path()).clusters
        except ConfigurationError:
            # Each request says what is wrong with the file, as with one controller.
            return None
        if len(configured) < 2:
            return None
        return ClusterSet(timeout=self.request_timeout, cluster_timeout=self.cluster_timeout)

    def initialize_settings(self) -> None:
        token = self._person_token() if self.hub_token else self.token
        self._factory = ClientFactory(
            controller_url=self.controller_url,
            token=token,
            token_file=self.token_file,
            timeout=self.request_timeout,
        )
        self._clusters = self._several_clusters()
        self._executor = ThreadPoolExecutor(
            max_workers=self.max_workers, thread_name_prefix="devboxes-api"
        )
        self._export_to_kernels(token)
        self._kernel_dir = self._offer_kernels() if self.devbox_kernels else None
        if self._kernel_dir is None and self.devbox_kernels:
            self.log.warning("devboxes: no devbox kernels are offered: %s", self._kernel_problem)
        several = self._clusters
        self._watcher = Watcher(
            # Kernels run on the default cluster, whose catalog their kernelspecs follow;
            # read within the clusters' timeout, so a silent one holds up no listing.
            self._factory
            if several is None
            else lambda: several.client(None, timeout=several.cluster_timeout),
            self.poll_interval,
            self._kernel_dir,
            self.kernel_python,
            self.log,
            dashboard_url=self.dashboard_url.strip().rstrip("/"),
            clusters=several,
        )
        self._watcher.start()
        self.settings.update(
            {
                FACTORY_SETTING: self._factory,
                EXECUTOR_SETTING: self._executor,
                WATCHER_SETTING: self._watcher,
            }
        )
        if several is not None:
            self.settings[CLUSTERS_SETTING] = several
            self.log.info(
                "Devboxes extension loaded; serving the clusters %s of the SDK configuration "
                "(default %s)",
                ", ".join(several.names()),
                several.default(),
            )
            return
        # The URL itself is not logged: a misconfigured one could carry credentials.
        source = "controller_url" if self.controller_url else "DEVBOX_URL or the SDK configuration"
        self.log.info(
            "Devboxes extension loaded; controller URL from %s; %s",
            source,
            f"acting as this person with {HUB_TOKEN_ENV}" if self.hub_token else "operator token",
        )

    def _export_to_kernels(self, token: str) -> None:
        """Put the controller URL and a token file into the server's environment.

        Kernels (and terminals) inherit the server's environment, so ``Client()`` in a
        notebook reaches the same controller as the extension with no setup. The token
        travels as a file path, never as a value: a token file rotated on disk reaches
        the next ``Client()``. Anyone who can run code on this Jupyter server can
        therefore use its token: the operator token in the single-operator trust model,
        the person's own hub token with ``hub_token``.
        """
        self._saved_env = {key: os.environ.get(key) for key in (ENV_URL, ENV_TOKEN, ENV_TOKEN_FILE)}
        self._token_copy: Path | None = None
        if self.controller_url:
            os.environ[ENV_URL] = self.controller_url.strip()
        if token:
            assert self.serverapp is not None, "settings are initialized by a server"
            runtime = Path(self.serverapp.runtime_dir)
            runtime.mkdir(parents=True, exist_ok=True)
            self._token_copy = runtime / f"{TOKEN_COPY}-{os.getpid()}"
            descriptor = os.open(self._token_copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(token.strip())
            token_file = str(self._token_copy)
        elif self.token_file:
            token_file = str(Path(self.token_file.strip()).expanduser().absolute())
        else:
            # Nothing configured here: kernels inherit DEVBOX_* or read the SDK file as is.
            return
        os.environ[ENV_TOKEN_FILE] = token_file
        # DEVBOX_TOKEN would win over the file and could belong to another controller.
        os.environ.pop(ENV_TOKEN, None)

    def _offer_kernels(self) -> Path | None:
        """A kernelspec directory of this server only, on its kernel search path; None
        when a devbox kernel could not start here (``_kernel_problem`` says why).

        It holds the CPU kernelspec at once; the watcher adds one per GPU profile that
        some node serves when it has read the catalog and the availability.
        """
        assert self.serverapp is not None, "settings are initialized by a server"
        self._kernel_problem = kernel_problem(self.serverapp.config)
        if self._kernel_problem is not None:
            return None
        directory = Path(self.serverapp.runtime_dir) / f"devboxes-kernels-{os.getpid()}"
        write_kernelspecs(directory, [], self.kernel_python)
        manager = self.serverapp.kernel_spec_manager
        assert manager is not None, "a server always has a kernelspec manager"
        manager.kernel_dirs = [*manager.kernel_dirs, str(directory)]
        return directory

    def _restore_environment(self) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if self._token_copy is not None:
            self._token_copy.unlink(missing_ok=True)

    def initialize_handlers(self) -> None:
        self.handlers.extend(routes())

    async def stop_extension(self) -> None:
        # Before the environment that points Client() at the controller is restored.
        await release.server_stopping(self.log)
        self._watcher.stop()
        # A call in flight (with its retries) would otherwise outlive the server.
        await asyncio.to_thread(self._watcher.join, WATCHER_STOP_SECONDS)
        if self._kernel_dir is not None:
            shutil.rmtree(self._kernel_dir, ignore_errors=True)
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._factory.close()
        if self._clusters is not None:
            self._clusters.close()
        self._restore_environment()
