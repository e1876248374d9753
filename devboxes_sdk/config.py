"""Where the SDK finds the API URL and token, and how ``devbox login`` saves them.

Each setting is taken from the first place that has it: an explicit argument, then the
environment (``DEVBOX_URL``, ``DEVBOX_TOKEN``, then ``DEVBOX_TOKEN_FILE``), then the TOML file at
``$DEVBOX_CONFIG`` or ``~/.config/devbox/config.toml``: keys ``url`` and ``token`` for one
controller, or a ``[clusters.NAME]`` table per cluster (``url``, and ``token``,
``token_file`` or ``token_from``: the name of the cluster whose token it shares).
"""

from __future__ import annotations

import ipaddress
import os
import re
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
ENV_CLUSTER = "DEVBOX_CLUSTER"
CONFIG_KEYS = ("url", "token", "default_cluster", "clusters")
CLUSTER_KEYS = ("url", "token", "token_file", "token_from")
# A cluster's name is written after a box's (NAME@CLUSTER) and in a column: a DNS label.
CLUSTER_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
CLUSTER_NAME_RULE = (
    "a cluster name is 1-63 lower-case letters, digits and '-', starting and ending "
    "with a letter or digit"
)
# Where a box name and its cluster's name meet: ``atlas@lab-a``.
CLUSTER_SEPARATOR = "@"
# ``create --cluster auto``: where the profile has a free device; never a cluster's name.
AUTO_CLUSTER = "auto"

# Plain http is only acceptable when the traffic never leaves the machine.
_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True)
class Settings:
    """A resolved configuration. The token never appears in the repr."""

    url: str
    token: str = field(repr=False)
    # The configured cluster these came from; None for a URL given or in DEVBOX_URL.
    cluster: str | None = None


@dataclass(frozen=True)
class ClusterSettings:
    """One named cluster's resolved URL and token. The token never appears in the repr."""

    name: str
    url: str
    token: str = field(repr=False)


@dataclass(frozen=True)
class ClusterEntry:
    """One ``[clusters.NAME]`` table of a configuration file, as written."""

    name: str
    url: str
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    token_from: str | None = None


@dataclass(frozen=True)
class FileConfig:
    """The contents of a configuration file (any key may be missing)."""

    path: Path
    url: str | None = None
    token: str | None = field(default=None, repr=False)
    clusters: tuple[ClusterEntry, ...] = ()
    default_cluster: str | None = None

    def cluster(self, name: str) -> ClusterEntry:
        """The entry of cluster ``name``; an error naming the configured ones otherwise."""
        for entry in self.clusters:
            if entry.name == name:
                return entry
        known = ", ".join(entry.name for entry in self.clusters) or "none"
        raise ConfigurationError(
            f"no cluster {name!r} in configuration file {self.path} (configured: {known})"
        )


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
    _known_keys(data, CONFIG_KEYS, f"configuration file {path}")
    values = _strings(data, ("url", "token", "default_cluster"), f"configuration file {path}")
    clusters = _clusters(path, data.get("clusters"))
    if clusters and ("url" in values or "token" in values):
        raise ConfigurationError(
            f"configuration file {path} has both a top-level url or token and [clusters]: "
            "move the top-level url and token into a [clusters.NAME] table"
        )
    default = values.get("default_cluster")
    if default is not None and default not in {entry.name for entry in clusters}:
        known = ", ".join(entry.name for entry in clusters) or "none"
        raise ConfigurationError(
            f"configuration file {path}: default_cluster {default!r} is not one of its "
            f"clusters (configured: {known})"
        )
    return FileConfig(
        path=path,
        url=values.get("url"),
        token=values.get("token"),
        clusters=clusters,
        default_cluster=default,
    )


def _known_keys(data: Mapping[str, object], allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ConfigurationError(
            f"{where} has unknown keys: {', '.join(unknown)} (allowed: {', '.join(allowed)})"
        )


def _strings(data: Mapping[str, object], keys: tuple[str, ...], where: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for key in keys:
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ConfigurationError(f"{where}: '{key}' must be a string")
        values[key] = value
    return values


def _clusters(path: Path, tables: object) -> tuple[ClusterEntry, ...]:
    if tables is None:
        return ()
    if not isinstance(tables, dict):
        raise ConfigurationError(
            f"configuration file {path}: 'clusters' must be tables, [clusters.NAME]"
        )
    entries: list[ClusterEntry] = []
    for name, table in tables.items():
        where = f"configuration file {path}, [clusters.{name}]"
        if not CLUSTER_NAME_RE.fullmatch(name):
            raise ConfigurationError(f"{where}: {CLUSTER_NAME_RULE}")
        if name == AUTO_CLUSTER:
            raise ConfigurationError(
                f"{where}: '{AUTO_CLUSTER}' is not a cluster name: create --cluster "
                f"{AUTO_CLUSTER} means the cluster with a free device"
            )
        if not isinstance(table, dict):
            raise ConfigurationError(f"{where} must be a table of {', '.join(CLUSTER_KEYS)}")
        _known_keys(table, CLUSTER_KEYS, where)
        values = _strings(table, CLUSTER_KEYS, where)
        if "url" not in values:
            raise ConfigurationError(f"{where} has no url")
        given = [key for key in ("token", "token_file", "token_from") if key in values]
        if len(given) > 1:
            raise ConfigurationError(f"{where}: give one of {', '.join(given)}, not several")
        entries.append(ClusterEntry(name=name, **values))
    names = {entry.name for entry in entries}
    for entry in entries:
        if entry.token_from is not None and entry.token_from not in names - {entry.name}:
            raise ConfigurationError(
                f"configuration file {path}, [clusters.{entry.name}]: token_from "
                f"{entry.token_from!r} names no other cluster of the file"
            )
    return tuple(entries)


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
    cluster: str | None = None,
) -> Settings:
    """Resolve the URL and token: arguments, then environment, then configuration file.

    With clusters in the file and no URL given or in ``DEVBOX_URL``, the URL and token
    are those of ``cluster``, else of the one ``DEVBOX_CLUSTER`` names, else of the
    file's ``default_cluster``, else of its first. A token from the configuration file
    is only used with the URL it was saved for, so pointing the client at another server
    never sends it there.
    """
    environ = os.environ if env is None else env
    env_url = environ.get(ENV_URL, "").strip() or None
    chosen = cluster or environ.get(ENV_CLUSTER, "").strip() or None
    if cluster is not None and url is not None:
        raise ConfigurationError("give a URL or a cluster, not both")
    explicit = _explicit_token(token, environ)
    need_file = cluster is not None or (url is None and env_url is None) or explicit is None
    file = read_config(config_path(environ)) if need_file else FileConfig(path=Path())
    if file.clusters and url is None and (env_url is None or cluster is not None):
        name = chosen or file.default_cluster or file.clusters[0].name
        resolved = resolve_cluster(file, file.cluster(name), environ, token)
        return Settings(url=resolved.url, token=resolved.token, cluster=resolved.name)
    if cluster is not None:
        raise ConfigurationError(
            f"no cluster {cluster!r}: configuration file {file.path} names no clusters"
        )

    if url is not None:
        chosen_url, url_source = url, "given explicitly"
    elif env_url is not None:
        chosen_url, url_source = env_url, f"from {ENV_URL}"
    elif file.url is not None:
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

    if explicit is not None:
        resolved_token = explicit
    elif file.clusters:
        # The token saved for a cluster at this URL (ssh's ProxyCommand is handed the URL).
        entry = next((e for e in file.clusters if _same_url(e.url, resolved_url)), None)
        if entry is None:
            raise NotConfigured(
                "token",
                f"no Devboxes token configured for {resolved_url}: none of the clusters of "
                f"{file.path} is at this URL; set {ENV_TOKEN} or pass token=",
            )
        resolved_token = resolve_cluster(file, entry, environ).token
    elif file.token is not None:
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


def _explicit_token(token: str | None, environ: Mapping[str, str]) -> str | None:
    """The token of the argument or the environment, if either gives one."""
    if token is not None:
        return normalize_token(token, "the explicit argument")
    env_token = environ.get(ENV_TOKEN, "").strip() or None
    if env_token is not None:
        return normalize_token(env_token, ENV_TOKEN)
    env_token_file = environ.get(ENV_TOKEN_FILE, "").strip() or None
    if env_token_file is not None:
        # Read on every resolve, so a rotated token reaches the next Client.
        return read_token_file(Path(env_token_file).expanduser())
    return None


def resolve_cluster(
    file: FileConfig,
    entry: ClusterEntry,
    env: Mapping[str, str] | None = None,
    token: str | None = None,
) -> ClusterSettings:
    """One cluster's URL and token: the token given, else the entry's own (``token``,
    ``token_file``, or that of the cluster ``token_from`` names), else the environment's."""
    environ = os.environ if env is None else env
    where = f"cluster {entry.name} of configuration file {file.path}"
    try:
        url = normalize_url(entry.url)
    except ConfigurationError as error:
        raise ConfigurationError(f"{error} ({where})") from None
    if token is not None:
        return ClusterSettings(entry.name, url, normalize_token(token, "the explicit argument"))
    source = token_source(file, entry)
    found: str | None
    if source.token is not None:
        found = normalize_token(source.token, f"cluster {source.name} of {file.path}")
    elif source.token_file is not None:
        found = read_token_file(Path(source.token_file).expanduser())
    else:
        found = _explicit_token(None, environ)
    if found is None:
        raise ConfigurationError(
            f"no Devboxes token configured for cluster {entry.name}: run "
            f"'devbox login --cluster {source.name}' or set {ENV_TOKEN}"
        )
    return ClusterSettings(name=entry.name, url=url, token=found)


def token_source(file: FileConfig, entry: ClusterEntry) -> ClusterEntry:
    """The cluster whose token ``entry`` uses: itself, or the end of its ``token_from``s."""
    seen = {entry.name}
    source = entry
    while source.token_from is not None:
        source = file.cluster(source.token_from)
        if source.name in seen:
            raise ConfigurationError(
                f"cluster {entry.name} of configuration file {file.path}: its token_from "
                "goes round in a circle"
            )
        seen.add(source.name)
    return source


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
    """Save the URL and token of one controller, readable only by the owner."""
    _write_private(path, f"url = {_toml_string(url)}\ntoken = {_toml_string(token)}\n")


def with_cluster_token(file: FileConfig, name: str, url: str, token: str) -> FileConfig:
    """``file`` with ``token`` saved for cluster ``name`` at ``url``: in the entry whose
    token that cluster uses (its ``token_from``), or in a new entry at the end."""
    entries = list(file.clusters)
    known = {entry.name: index for index, entry in enumerate(entries)}
    if name not in known:
        entries.append(ClusterEntry(name=name, url=url, token=token))
        return FileConfig(file.path, clusters=tuple(entries), default_cluster=file.default_cluster)
    source = token_source(file, entries[known[name]])
    index = known[source.name]
    entries[index] = ClusterEntry(name=source.name, url=source.url, token=token)
    return FileConfig(file.path, clusters=tuple(entries), default_cluster=file.default_cluster)


def write_clusters(file: FileConfig) -> None:
    """Save the clusters of ``file`` to its path, readable only by the owner."""
    lines = []
    if file.default_cluster is not None:
        lines += [f"default_cluster = {_toml_string(file.default_cluster)}", ""]
    for entry in file.clusters:
        lines.append(f"[clusters.{entry.name}]")
        for key in CLUSTER_KEYS:
            value = getattr(entry, key)
            if value is not None:
                lines.append(f"{key} = {_toml_string(value)}")
        lines.append("")
    _write_private(file.path, "\n".join(lines))


def _write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``, readable only by the owner (file 0600, new dirs
    0700), atomically (``mkstemp`` creates it 0600), so a crash never leaves half a
    token behind and the token is never readable by others."""
    directory = path.parent
    if not directory.exists():
        directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.mkdir(mode=0o700, exist_ok=True)
        directory.chmod(0o700)
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


def chosen_cluster(cluster: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """The configured cluster one-controller calls go to, when the configuration file has
    several: ``cluster``, else the one ``DEVBOX_CLUSTER`` names, else ``default_cluster``,
    else the first. None with fewer than two, or when ``DEVBOX_URL`` names the controller
    and no ``cluster`` is given: then there is no cluster to keep to."""
    environ = os.environ if env is None else env
    if cluster is None and environ.get(ENV_URL, "").strip():
        return None
    file = read_config(config_path(environ))
    if len(file.clusters) < 2:
        return None
    named = cluster or environ.get(ENV_CLUSTER, "").strip()
    return named or file.default_cluster or file.clusters[0].name


def split_name(text: str) -> tuple[str, str | None]:
    """``NAME@CLUSTER`` as (NAME, CLUSTER); a bare name has no cluster."""
    name, separator, cluster = text.partition(CLUSTER_SEPARATOR)
    if not separator:
        return text, None
    if not cluster:
        raise ConfigurationError(f"{text!r} names no cluster after '{CLUSTER_SEPARATOR}'")
    return name, cluster
