"""Builds the SDK client the server extension talks to the controller with."""

from __future__ import annotations

from pathlib import Path

import requests

from devboxes_sdk.client import Client
from devboxes_sdk.config import read_token_file


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
