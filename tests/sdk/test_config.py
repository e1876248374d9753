"""Configuration resolution, URL and token rules, and the config file format."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from devboxes_sdk import Client, ConfigurationError, NotConfigured
from devboxes_sdk.config import (
    config_path,
    normalize_token,
    normalize_url,
    read_config,
    resolve,
    write_config,
)

TOKEN_FILE = "file-token-" + "f" * 32
TOKEN_ENV = "env-token-" + "e" * 32
TOKEN_ARG = "arg-token-" + "a" * 32


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return _write(
        tmp_path / "devbox.toml",
        f'url = "https://file.example.com"\ntoken = "{TOKEN_FILE}"\n',
    )


def test_default_config_path_is_under_home(tmp_path: Path) -> None:
    assert config_path({"HOME": str(tmp_path)}) == tmp_path / ".config/devbox/config.toml"


def test_devbox_config_overrides_default_path(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "DEVBOX_CONFIG": str(tmp_path / "elsewhere.toml")}
    assert config_path(env) == tmp_path / "elsewhere.toml"


def test_file_is_used_when_nothing_else_is_set(config_file: Path) -> None:
    settings = resolve(env={"DEVBOX_CONFIG": str(config_file)})
    assert settings.url == "https://file.example.com"
    assert settings.token == TOKEN_FILE


def test_default_file_under_home_is_read(tmp_path: Path) -> None:
    _write(
        tmp_path / ".config/devbox/config.toml",
        f'url = "https://home.example.com/"\ntoken = "{TOKEN_FILE}"\n',
    )
    settings = resolve(env={"HOME": str(tmp_path)})
    assert settings.url == "https://home.example.com"


def test_environment_beats_file(config_file: Path) -> None:
    env = {
        "DEVBOX_CONFIG": str(config_file),
        "DEVBOX_URL": "https://env.example.com",
        "DEVBOX_TOKEN": TOKEN_ENV,
    }
    settings = resolve(env=env)
    assert (settings.url, settings.token) == ("https://env.example.com", TOKEN_ENV)


def test_arguments_beat_environment_and_file(config_file: Path) -> None:
    env = {
        "DEVBOX_CONFIG": str(config_file),
        "DEVBOX_URL": "https://env.example.com",
        "DEVBOX_TOKEN": TOKEN_ENV,
    }
    settings = resolve("https://arg.example.com", TOKEN_ARG, env=env)
    assert (settings.url, settings.token) == ("https://arg.example.com", TOKEN_ARG)


def test_each_key_resolves_independently(config_file: Path) -> None:
    env = {"DEVBOX_CONFIG": str(config_file), "DEVBOX_TOKEN": TOKEN_ENV}
    settings = resolve(env=env)
    assert (settings.url, settings.token) == ("https://file.example.com", TOKEN_ENV)


def test_file_token_is_not_sent_to_another_url(config_file: Path) -> None:
    env = {"DEVBOX_CONFIG": str(config_file), "DEVBOX_URL": "https://other.example.com"}
    with pytest.raises(ConfigurationError, match="belongs to another URL") as caught:
        resolve(env=env)
    assert TOKEN_FILE not in str(caught.value)


def test_file_token_without_url_works_with_any_url(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.toml", f'token = "{TOKEN_FILE}"\n')
    settings = resolve("https://any.example.com", env={"DEVBOX_CONFIG": str(path)})
    assert settings.token == TOKEN_FILE


def test_file_url_matches_after_normalisation(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "c.toml", f'url = "https://file.example.com/"\ntoken = "{TOKEN_FILE}"\n'
    )
    settings = resolve("HTTPS://file.example.com", env={"DEVBOX_CONFIG": str(path)})
    assert settings.token == TOKEN_FILE


def test_token_file_from_environment_is_read_each_time(tmp_path: Path) -> None:
    token_file = _write(tmp_path / "token", f"{TOKEN_FILE}\n")
    env = {"HOME": str(tmp_path), "DEVBOX_TOKEN_FILE": str(token_file)}
    assert resolve("https://x.example.com", env=env).token == TOKEN_FILE
    token_file.write_text(TOKEN_ENV)
    assert resolve("https://x.example.com", env=env).token == TOKEN_ENV


def test_token_variable_beats_token_file(tmp_path: Path) -> None:
    env = {"DEVBOX_TOKEN": TOKEN_ENV, "DEVBOX_TOKEN_FILE": str(tmp_path / "absent")}
    assert resolve("https://x.example.com", env=env).token == TOKEN_ENV


def test_token_file_beats_config_file(config_file: Path, tmp_path: Path) -> None:
    token_file = _write(tmp_path / "token", TOKEN_ENV)
    env = {"DEVBOX_CONFIG": str(config_file), "DEVBOX_TOKEN_FILE": str(token_file)}
    assert resolve(env=env).token == TOKEN_ENV


def test_unreadable_token_file_is_named(tmp_path: Path) -> None:
    env = {"DEVBOX_TOKEN_FILE": str(tmp_path / "absent")}
    with pytest.raises(ConfigurationError, match=r"cannot read the token file .*absent"):
        resolve("https://x.example.com", env=env)


def test_missing_url_is_explained(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no Devboxes URL configured") as caught:
        resolve(env={"HOME": str(tmp_path)})
    assert isinstance(caught.value, NotConfigured)
    assert caught.value.setting == "url"


def test_missing_token_is_explained(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no Devboxes token configured") as caught:
        resolve("https://x.example.com", env={"HOME": str(tmp_path)})
    assert isinstance(caught.value, NotConfigured)
    assert caught.value.setting == "token"


def test_blank_environment_values_are_ignored(config_file: Path) -> None:
    env = {"DEVBOX_CONFIG": str(config_file), "DEVBOX_URL": "  ", "DEVBOX_TOKEN": ""}
    assert resolve(env=env).url == "https://file.example.com"


def test_bad_url_names_its_source(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "DEVBOX_URL": "http://remote.example.com"}
    with pytest.raises(ConfigurationError, match=r"\(from DEVBOX_URL\)"):
        resolve(token=TOKEN_ARG, env=env)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://devboxes.example.com", "https://devboxes.example.com"),
        ("https://devboxes.example.com/", "https://devboxes.example.com"),
        ("  https://devboxes.example.com:8443/base/  ", "https://devboxes.example.com:8443/base"),
        ("HTTPS://Devboxes.example.com", "https://Devboxes.example.com"),
        ("http://localhost:8000", "http://localhost:8000"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        ("http://[::1]:8000", "http://[::1]:8000"),
    ],
)
def test_accepted_urls(url: str, expected: str) -> None:
    assert normalize_url(url) == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "empty"),
        ("devboxes.example.com", "must start with https://"),
        ("ftp://devboxes.example.com", "must start with https://"),
        ("http://devboxes.example.com", "refusing plain http"),
        ("http://127.0.0.2:8000", "refusing plain http"),
        ("http://localhost.example.com", "refusing plain http"),
        ("https://user:secret-password@devboxes.example.com", "credentials"),
        ("https://devboxes.example.com/?token=secret-query", "query string"),
        ("https://devboxes.example.com/?", "query string"),
        ("https://devboxes.example.com/#secret-fragment", "fragment"),
        ("https://devboxes.example.com:notaport", "invalid port"),
        ("https://devboxes.example.com/a b", "whitespace"),
    ],
)
def test_refused_urls(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        normalize_url(url)
    text = str(caught.value)
    for secret in ("secret-password", "secret-query", "secret-fragment"):
        assert secret not in text


def test_token_is_stripped() -> None:
    assert normalize_token(f"  {TOKEN_ARG}\n", "test") == TOKEN_ARG


@pytest.mark.parametrize("token", ["", "   ", "two words-" + "x" * 30, "tab\there", "nul\x00x"])
def test_unusable_tokens_are_refused_without_echo(token: str) -> None:
    with pytest.raises(ConfigurationError, match="the token from test") as caught:
        normalize_token(token, "test")
    if token.strip():
        assert token.strip() not in str(caught.value)


def test_invalid_toml_is_reported_with_path(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.toml", 'url = "https://x.example.com\n')
    with pytest.raises(ConfigurationError, match="is not valid TOML") as caught:
        read_config(path)
    assert str(path) in str(caught.value)


def test_unknown_keys_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.toml", 'url = "https://x.example.com"\ntokn = "oops"\n')
    with pytest.raises(ConfigurationError, match="unknown keys: tokn"):
        read_config(path)


def test_non_string_values_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.toml", "token = 12345\n")
    with pytest.raises(ConfigurationError, match="'token' must be a string") as caught:
        read_config(path)
    assert "12345" not in str(caught.value)


def test_missing_file_is_empty(tmp_path: Path) -> None:
    config = read_config(tmp_path / "absent.toml")
    assert (config.url, config.token) == (None, None)


def test_write_config_permissions_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "home" / ".config" / "devbox" / "config.toml"
    token = 'quote"and\\backslash-' + "t" * 32
    write_config(path, "https://devboxes.example.com", token)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    config = read_config(path)
    assert (config.url, config.token) == ("https://devboxes.example.com", token)
    assert [p.name for p in path.parent.iterdir()] == ["config.toml"]


def test_write_config_replaces_existing_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "config.toml", 'url = "https://old.example.com"\n')
    path.chmod(0o644)
    write_config(path, "https://new.example.com", TOKEN_ARG)
    assert read_config(path).url == "https://new.example.com"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_write_config_leaves_existing_directory_mode_alone(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    write_config(shared / "devbox.toml", "https://x.example.com", TOKEN_ARG)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755


def test_settings_and_file_config_reprs_hide_the_token(config_file: Path) -> None:
    settings = resolve(env={"DEVBOX_CONFIG": str(config_file)})
    assert TOKEN_FILE not in repr(settings)
    assert TOKEN_FILE not in repr(read_config(config_file))


def test_client_uses_environment_and_hides_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("DEVBOX_CONFIG", raising=False)
    monkeypatch.setenv("DEVBOX_URL", "https://env.example.com/")
    monkeypatch.setenv("DEVBOX_TOKEN", TOKEN_ENV)
    with Client() as client:
        assert client.url == "https://env.example.com"
        assert TOKEN_ENV not in repr(client)
        assert TOKEN_ENV not in repr(vars(client))


def test_client_refuses_bad_timeout() -> None:
    with pytest.raises(ValueError, match="timeout"):
        Client("https://x.example.com", TOKEN_ARG, timeout=0)
