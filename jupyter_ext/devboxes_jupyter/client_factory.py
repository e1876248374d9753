"""Builds the SDK client the server extension talks to the controller with."""

from __future__ import annotations

from pathlib import Path

import requests

from devboxes_sdk.client import Client
from devboxes_sdk.config import normalize_token
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

    def _read_token_file(self) -> str:
        path = Path(self.token_file).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigurationError(
                f"cannot read the token file {path}: {error.strerror or error}"
            ) from None
        except UnicodeDecodeError:
            raise ConfigurationError(f"the token file {path} is not UTF-8 text") from None
        return normalize_token(text, f"the token file {path}")

    def token(self) -> str | None:
        """The configured token, or None to let the SDK resolve one."""
        if self._token:
            return self._token
        if self.token_file:
            return self._read_token_file()
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
