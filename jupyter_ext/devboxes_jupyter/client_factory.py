"""Builds the SDK clients the server extension talks to the controllers with: one
controller's (:class:`ClientFactory`), or each cluster's of the SDK configuration file
when it lists several (:class:`ClusterSet`)."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import requests

from devboxes_sdk.client import Client
from devboxes_sdk.clusters import Clusters
from devboxes_sdk.config import (
    FileConfig,
    chosen_cluster,
    config_path,
    read_config,
    read_token_file,
    resolve,
    resolve_cluster,
)
from devboxes_sdk.errors import ConfigurationError


class ClientFactory:
    """Makes a :class:`Client` per request from the extension's settings.

    Empty settings fall back to the SDK's own resolution (``DEVBOX_URL``,
    ``DEVBOX_TOKEN``, then the configuration file). The token file is read on every
    call so that a rotated token is picked up without restarting Jupyter. All clients
    share one connection pool.
    """

    def __init__(
        self,
        controller_url: str = "",
        token: str = "",
        token_file: str = "",
        timeout: float = 30.0,
    ) -> None:
        if not timeout > 0:
            raise ValueError("request_timeout must be a positive number of seconds")
        self.controller_url = controller_url.strip()
        self._token = token.strip()
        self.token_file = token_file.strip()
        self.timeout = timeout
        self._session = requests.Session()

    def __repr__(self) -> str:
        return (
            f"ClientFactory(controller_url={self.controller_url!r}, "
            f"token_file={self.token_file!r}, timeout={self.timeout!r})"
        )

    def token(self) -> str | None:
        """The configured token, or None to let the SDK resolve one."""
        if self._token:
            return self._token
        if self.token_file:
            return read_token_file(Path(self.token_file).expanduser())
        return None

    def __call__(self, extra_seconds: float = 0.0) -> Client:
        """A client whose read timeout also covers ``extra_seconds`` of server-side wait."""
        return Client(
            self.controller_url or None,
            self.token(),
            timeout=self.timeout + extra_seconds,
            session=self._session,
        )

    def close(self) -> None:
        self._session.close()


class ClusterSet:
    """The clusters of the SDK configuration file, for a server that serves them all.

    ``client(name)`` is one cluster's :class:`Client`, its token resolved on every call
    (so a rotated token or a new ``devbox login`` needs no restart); ``merged()`` is a
    :class:`Clusters` over every cluster, for the calls asked of all of them at once,
    made again whenever a cluster's URL or token changes. Every token stays here.
    """

    def __init__(self, timeout: float = 30.0, cluster_timeout: float = 3.0) -> None:
        if not timeout > 0 or not cluster_timeout > 0:
            raise ValueError("timeouts must be positive numbers of seconds")
        self.timeout = timeout
        self.cluster_timeout = cluster_timeout
        self._session = requests.Session()
        self._lock = threading.Lock()
        self._merged: Clusters | None = None
        self._fingerprint: tuple[object, ...] | None = None

    def __repr__(self) -> str:
        return f"ClusterSet(timeout={self.timeout!r}, cluster_timeout={self.cluster_timeout!r})"

    @staticmethod
    def _file() -> FileConfig:
        return read_config(config_path())

    def names(self) -> tuple[str, ...]:
        """The configured clusters' names, in the file's order."""
        return tuple(entry.name for entry in self._file().clusters)

    def default(self) -> str:
        """The cluster a request that names none goes to, as ``Client()`` chooses it: the
        file's ``default_cluster``, else its first."""
        chosen = chosen_cluster()
        if chosen is not None:
            return chosen
        # The file came to name fewer clusters since the server started.
        file = self._file()
        if not file.clusters:
            raise ConfigurationError(f"configuration file {file.path} names no clusters")
        return file.default_cluster or file.clusters[0].name

    def client(
        self, cluster: str | None, extra_seconds: float = 0.0, timeout: float | None = None
    ) -> Client:
        """``cluster``'s client (None: the default cluster); its read timeout also covers
        ``extra_seconds`` of server-side wait. Given its own ``timeout``, it tries each
        request once, as the merged calls do, so a silent cluster costs that at most."""
        settings = resolve(cluster=cluster or self.default())
        return Client(
            settings.url,
            settings.token,
            timeout=(self.timeout if timeout is None else timeout) + extra_seconds,
            session=self._session,
            retry=timeout is None,
        )

    def merged(self) -> Clusters:
        """Every configured cluster at once, each within ``cluster_timeout`` seconds."""
        file = self._file()
        seen: list[tuple[str, str, str]] = []
        for entry in file.clusters:
            try:
                settings = resolve_cluster(file, entry)
            except ConfigurationError as error:
                seen.append((entry.name, entry.url, f"problem: {error}"))
            else:
                digest = hashlib.sha256(settings.token.encode()).hexdigest()
                seen.append((settings.name, settings.url, digest))
        fingerprint = (file.default_cluster, tuple(seen))
        with self._lock:
            if self._merged is None or fingerprint != self._fingerprint:
                old, self._merged = self._merged, Clusters(timeout=self.cluster_timeout)
                self._fingerprint = fingerprint
                if old is not None:
                    old.close()
            return self._merged

    def close(self) -> None:
        with self._lock:
            if self._merged is not None:
                self._merged.close()
        self._session.close()
