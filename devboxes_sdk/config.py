"""Where the SDK finds the API URL and token, and how ``devbox login`` saves them.

Each setting is taken from the first place that has it: an explicit argument, then the
environment (``DEVBOX_URL``, ``DEVBOX_TOKEN``, then ``DEVBOX_TOKEN_FILE``), then the TOML file at
``$DEVBOX_CONFIG`` or ``~/.config/devbox/config.toml`` (keys ``url`` and ``token``).
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

from devboxes_sdk._wire import API_PREFIX
from devboxes_sdk.errors import ConfigurationError, NotConfigured

ENV_URL = "DEVBOX_URL"
ENV_TOKEN = "DEVBOX_TOKEN"  # noqa: S105 - the variable name, not a secret
ENV_TOKEN_FILE = "DEVBOX_TOKEN_FILE"  # noqa: S105 - the variable name, not a secret
ENV_CONFIG = "DEVBOX_CONFIG"
CONFIG_KEYS = ("url", "token")

# Plain http is only acceptable when the traffic never leaves the machine.
_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True)
class Settings:
    """A resolved configuration. The token never appears in the repr."""

    url: str
    token: str = field(repr=False)


@dataclass(frozen=True)
class FileConfig:
    """The contents of a configuration file (either key may be missing)."""

    path: Path
    url: str | None = None
    token: str | None = field(default=None, repr=False)


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """The configuration file in use: ``$DEVBOX_CONFIG`` or the per-user default."""
    environ = os.environ if env is None else env
    explicit = environ.get(ENV_CONFIG, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / ".config" / "devbox" / "config.toml"


def _origin(parts: SplitResult) -> str:
    """``scheme://host[:port]`` of a URL: safe to show, never holds credentials."""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def normalize_url(url: str) -> str:
    """Check an API base URL and return it without a trailing slash.

    Accepted: ``https://`` anywhere, ``http://`` only to localhost, 127.0.0.1 or ::1.
    Refused: credentials, a query string or a fragment (they would leak secrets into
    logs or be silently ignored), and a path holding the API's own ``/api/v1``. Error
    messages never repeat the refused secrets.
    """
    text = url.strip()
    if not text:
        raise ConfigurationError("the Devboxes URL is empty")
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.netloc:
        raise ConfigurationError(
            "the Devboxes URL must start with https:// (or http:// for localhost), "
            "e.g. https://devboxes.example.com"
        )
    if "@" in parts.netloc:
        raise ConfigurationError(
            "the Devboxes URL must not contain credentials (user:password@); "
            f"pass the token with --token, {ENV_TOKEN} or the configuration file"
        )
    if not parts.hostname:
        raise ConfigurationError(f"the Devboxes URL {_origin(parts)} has no host")
    try:
        parts.port  # noqa: B018 - parsing the port is what validates it
    except ValueError:
        raise ConfigurationError(
            f"the Devboxes URL for host {parts.hostname} has an invalid port"
        ) from None
    if "?" in text:
        raise ConfigurationError(
            f"the Devboxes URL {_origin(parts)} must not contain a query string (?...)"
        )
    if "#" in text:
        raise ConfigurationError(
            f"the Devboxes URL {_origin(parts)} must not contain a fragment (#...)"
        )
    if any(char.isspace() for char in text):
        raise ConfigurationError(f"the Devboxes URL {_origin(parts)} contains whitespace")
    if scheme == "http" and not _is_loopback(parts.hostname):
        raise ConfigurationError(
            f"refusing plain http to {parts.hostname}: the token would travel unencrypted; "
            "use https:// (http:// is only allowed for localhost, 127.0.0.1 and ::1)"
        )
    path = parts.path.rstrip("/")
    # The API's own path in the URL (copied from the API docs, say) would be doubled by
    # every request and answered 404: name the base URL instead.
    api_at = f"{path}/".find(f"{API_PREFIX}/")
    if api_at >= 0:
        raise ConfigurationError(
            f"the Devboxes URL {scheme}://{parts.netloc}{path} includes the API path "
            f"{API_PREFIX}; use the controller's base URL {scheme}://{parts.netloc}"
            f"{path[:api_at]} (requests add {API_PREFIX} themselves)"
        )
    return f"{scheme}://{parts.netloc}{path}"


def _is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_HOSTS:
        return True
    try:
        return str(ipaddress.ip_address(host)) in _LOOPBACK_HOSTS
    except ValueError:
        return False


def normalize_token(token: str, source: str) -> str:
    """Strip a token and make sure it can travel in an HTTP header.

    ``source`` names where it came from; the token itself is never part of a message.
    """
    value = token.strip()
    if not value:
        raise ConfigurationError(f"the token from {source} is empty")
    if any(char.isspace() or not char.isprintable() for char in value) or not value.isascii():
        raise ConfigurationError(
            f"the token from {source} contains whitespace or non-printable characters"
        )
    return value


def read_config(path: Path) -> FileConfig:
    """Read a configuration file; a missing file is an empty configuration."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return FileConfig(path=path)
    except OSError as error:
        raise ConfigurationError(
            f"cannot read configuration file {path}: {error.strerror}"
        ) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigurationError(f"configuration file {path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigurationError(f"configuration file {path} is not valid TOML: {error}") from None
    unknown = sorted(set(data) - set(CONFIG_KEYS))
    if unknown:
        raise ConfigurationError(
            f"configuration file {path} has unknown keys: {', '.join(unknown)} "
            f"(allowed: {', '.join(CONFIG_KEYS)})"
        )
    values: dict[str, str] = {}
    for key in CONFIG_KEYS:
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ConfigurationError(f"configuration file {path}: '{key}' must be a string")
        values[key] = value
    return FileConfig(path=path, url=values.get("url"), token=values.get("token"))


def read_token_file(path: Path) -> str:
    """The token held in ``path``, checked like any other token."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigurationError(
            f"cannot read the token file {path}: {error.strerror or error}"
        ) from None
    except UnicodeDecodeError:
        raise ConfigurationError(f"the token file {path} is not UTF-8 text") from None
    return normalize_token(text, f"the token file {path}")


def resolve(
    url: str | None = None,
    token: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve the URL and token: arguments, then environment, then configuration file.

    A token from the configuration file is only used with the URL it was saved for, so
    pointing the client at another server never sends it there.
    """
    environ = os.environ if env is None else env
    env_url = environ.get(ENV_URL, "").strip() or None
    env_token = environ.get(ENV_TOKEN, "").strip() or None
    env_token_file = environ.get(ENV_TOKEN_FILE, "").strip() or None
    need_file = (url is None and env_url is None) or (
        token is None and env_token is None and env_token_file is None
    )
    file = read_config(config_path(environ)) if need_file else None

    if url is not None:
        chosen_url, url_source = url, "given explicitly"
    elif env_url is not None:
        chosen_url, url_source = env_url, f"from {ENV_URL}"
    elif file is not None and file.url is not None:
        chosen_url, url_source = file.url, f"from configuration file {file.path}"
    else:
        raise NotConfigured(
            "url",
            f"no Devboxes URL configured: run 'devbox login --url URL', set {ENV_URL}, "
            "or pass url=",
        )
    try:
        resolved_url = normalize_url(chosen_url)
    except ConfigurationError as error:
        raise ConfigurationError(f"{error} ({url_source})") from None

    if token is not None:
        resolved_token = normalize_token(token, "the explicit argument")
    elif env_token is not None:
        resolved_token = normalize_token(env_token, ENV_TOKEN)
    elif env_token_file is not None:
        # Read on every resolve, so a rotated token reaches the next Client.
        resolved_token = read_token_file(Path(env_token_file).expanduser())
    elif file is not None and file.token is not None:
        source = f"configuration file {file.path}"
        if file.url is not None and not _same_url(file.url, resolved_url):
            raise ConfigurationError(
                f"no token for {resolved_url}: the token in {file.path} belongs to "
                f"another URL; pass a token or set {ENV_TOKEN}"
            )
        resolved_token = normalize_token(file.token, source)
    else:
        raise NotConfigured(
            "token",
            f"no Devboxes token configured: run 'devbox login', set {ENV_TOKEN}, or pass token=",
        )
    return Settings(url=resolved_url, token=resolved_token)


def _same_url(saved: str, resolved: str) -> bool:
    try:
        return normalize_url(saved) == resolved
    except ConfigurationError:
        return False


def _toml_string(value: str) -> str:
    escaped = []
    for char in value:
        if char == "\\":
            escaped.append("\\\\")
        elif char == '"':
            escaped.append('\\"')
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\u{ord(char):04x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def write_config(path: Path, url: str, token: str) -> None:
    """Save the URL and token, readable only by the owner (file 0600, new dirs 0700).

    The file is replaced atomically (``mkstemp`` creates it 0600), so a crash never
    leaves half a token behind and the token is never readable by others.
    """
    directory = path.parent
    if not directory.exists():
        directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.mkdir(mode=0o700, exist_ok=True)
        directory.chmod(0o700)
    text = f"url = {_toml_string(url)}\ntoken = {_toml_string(token)}\n"
    try:
        descriptor, temporary = tempfile.mkstemp(
            dir=directory, prefix=".config-", suffix=".toml.tmp"
        )
    except OSError as error:
        raise ConfigurationError(f"cannot write to {directory}: {error.strerror}") from None
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise ConfigurationError(f"cannot write {path}: {error.strerror}") from None
