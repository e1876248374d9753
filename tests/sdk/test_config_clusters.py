"""Several clusters in one configuration file: how they are read, chosen and saved."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from devboxes_sdk import ConfigurationError, NotConfigured
from devboxes_sdk.config import (
    read_config,
    resolve,
    resolve_cluster,
    split_name,
    with_cluster_token,
    write_clusters,
)

TOKEN_A = "token-a-" + "a" * 32
TOKEN_B = "token-b-" + "b" * 32
TOKEN_ENV = "env-token-" + "e" * 32

TWO = f"""
[clusters.lab-a]
url = "https://a.example.com"
token = "{TOKEN_A}"

[clusters.lab-b]
url = "https://b.example.com/"
token_from = "lab-a"
"""


def _config(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return {"DEVBOX_CONFIG": str(path)}


def test_the_first_cluster_is_the_default_and_token_from_shares_a_token(tmp_path: Path) -> None:
    env = _config(tmp_path, TWO)
    first = resolve(env=env)
    assert (first.url, first.token, first.cluster) == ("https://a.example.com", TOKEN_A, "lab-a")
    second = resolve(env=env, cluster="lab-b")
    assert (second.url, second.token, second.cluster) == (
        "https://b.example.com",
        TOKEN_A,
        "lab-b",
    )


def test_devbox_cluster_and_default_cluster_choose_and_devbox_url_still_wins(
    tmp_path: Path,
) -> None:
    env = _config(tmp_path, 'default_cluster = "lab-b"\n' + TWO)
    assert resolve(env=env).cluster == "lab-b"
    assert resolve(env={**env, "DEVBOX_CLUSTER": "lab-a"}).cluster == "lab-a"
    direct = resolve(env={**env, "DEVBOX_URL": "https://c.example.com", "DEVBOX_TOKEN": TOKEN_ENV})
    assert (direct.url, direct.token, direct.cluster) == ("https://c.example.com", TOKEN_ENV, None)


def test_a_url_of_a_configured_cluster_gets_that_clusters_token(tmp_path: Path) -> None:
    env = _config(tmp_path, TWO)
    assert resolve(env={**env, "DEVBOX_URL": "https://b.example.com"}).token == TOKEN_A
    with pytest.raises(NotConfigured, match="none of the clusters"):
        resolve(env={**env, "DEVBOX_URL": "https://elsewhere.example.com"})


def test_a_cluster_without_a_token_takes_the_environments_or_says_how_to_log_in(
    tmp_path: Path,
) -> None:
    env = _config(tmp_path, '[clusters.lab-a]\nurl = "https://a.example.com"\n')
    assert resolve(env={**env, "DEVBOX_TOKEN": TOKEN_ENV}).token == TOKEN_ENV
    with pytest.raises(ConfigurationError, match="devbox login --cluster lab-a"):
        resolve(env=env)


def test_a_token_file_is_read_for_its_cluster(tmp_path: Path) -> None:
    token_file = tmp_path / "b.token"
    token_file.write_text(TOKEN_B + "\n", encoding="utf-8")
    env = _config(
        tmp_path, f'[clusters.lab-b]\nurl = "https://b.example.com"\ntoken_file = "{token_file}"\n'
    )
    assert resolve(env=env, cluster="lab-b").token == TOKEN_B


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[clusters.Lab_A]\nurl = "https://a.example.com"\n', "a cluster name is 1-63"),
        ('[clusters.auto]\nurl = "https://a.example.com"\n', "'auto' is not a cluster name"),
        ("[clusters.lab-a]\ntoken = 'x'\n", r"\[clusters.lab-a\] has no url"),
        ('[clusters.lab-a]\nurl = "https://a.example.com"\nport = 1\n', "unknown keys: port"),
        (
            '[clusters.lab-a]\nurl = "https://a.example.com"\ntoken = "x"\ntoken_from = "b"\n',
            "give one of token, token_from, not several",
        ),
        ('[clusters.lab-a]\nurl = "https://a.example.com"\ntoken_from = "lab-z"\n', "lab-z"),
        ('url = "https://a.example.com"\n' + TWO, "both a top-level url or token and"),
        ('default_cluster = "lab-z"\n' + TWO, "default_cluster 'lab-z' is not one of"),
        ("clusters = 3\n", "'clusters' must be tables"),
    ],
)
def test_a_broken_cluster_table_is_refused_with_where_and_why(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        resolve(env=_config(tmp_path, text))


def test_token_from_in_a_circle_is_refused(tmp_path: Path) -> None:
    env = _config(
        tmp_path,
        '[clusters.a]\nurl = "https://a.example.com"\ntoken_from = "b"\n'
        '[clusters.b]\nurl = "https://b.example.com"\ntoken_from = "a"\n',
    )
    with pytest.raises(ConfigurationError, match="goes round in a circle"):
        resolve(env=env)


def test_an_unknown_cluster_names_the_configured_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"no cluster 'lab-z' .*configured: lab-a, lab-b"):
        resolve(env=_config(tmp_path, TWO), cluster="lab-z")


def test_a_login_saves_into_the_cluster_whose_token_is_shared_and_keeps_the_rest(
    tmp_path: Path,
) -> None:
    env = _config(tmp_path, 'default_cluster = "lab-b"\n' + TWO)
    file = read_config(Path(env["DEVBOX_CONFIG"]))
    write_clusters(with_cluster_token(file, "lab-b", "https://b.example.com", TOKEN_B))
    again = read_config(file.path)
    assert [e.name for e in again.clusters] == ["lab-a", "lab-b"]
    assert again.default_cluster == "lab-b"
    assert again.cluster("lab-a").token == TOKEN_B
    assert again.cluster("lab-b").token_from == "lab-a"
    assert stat.S_IMODE(file.path.stat().st_mode) == 0o600
    write_clusters(with_cluster_token(again, "lab-c", "https://c.example.com", TOKEN_ENV))
    added = read_config(file.path)
    assert resolve_cluster(added, added.cluster("lab-c")).token == TOKEN_ENV


def test_a_name_and_its_cluster_are_split_at_the_at_sign() -> None:
    assert split_name("atlas@lab-a") == ("atlas", "lab-a")
    assert split_name("atlas") == ("atlas", None)
    with pytest.raises(ConfigurationError, match="names no cluster"):
        split_name("atlas@")


def test_no_cluster_answering_is_an_error_with_a_line_for_each(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = _config(
        tmp_path,
        '[clusters.down]\nurl = "http://127.0.0.1:9"\ntoken = "' + TOKEN_A + '"\n\n'
        '[clusters.tokenless]\nurl = "https://b.example.com"\n',
    )
    done = subprocess.run(
        [sys.executable, "-m", "devboxes_sdk", "list"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env},
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    down, tokenless = done.stderr.splitlines()
    assert down.startswith("down: cannot reach the Devboxes API at http://127.0.0.1:9")
    assert tokenless == (
        "tokenless: no Devboxes token configured for cluster tokenless: run "
        "'devbox login --cluster tokenless' or set DEVBOX_TOKEN"
    )
    assert done.stdout == ""


def test_the_clusters_object_keeps_the_files_order_and_default(tmp_path: Path) -> None:
    from devboxes_sdk import Clusters

    with Clusters(env=_config(tmp_path, 'default_cluster = "lab-b"\n' + TWO)) as clusters:
        assert clusters.names == ("lab-a", "lab-b")
        assert clusters.default == "lab-b"
    with Clusters(env=_config(tmp_path, TWO)) as clusters:
        assert clusters.default == "lab-a"
