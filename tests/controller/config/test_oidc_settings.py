"""The OIDC part of the auth settings: what it accepts, and how it refuses the rest."""

from __future__ import annotations

from typing import Any

import pytest
from devboxes_controller.config.settings import settings_from_mapping
from devboxes_controller.config.violations import ConfigError


def _oidc(**fields: Any) -> dict[str, Any]:
    return {
        "auth": {
            "oidc": {"issuer": "https://id.example.com/realms/ml", "audience": "devboxes", **fields}
        }
    }


def _violations(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        settings_from_mapping(data)
    return caught.value.violations


def test_oidc_is_off_unless_configured_and_has_defaults() -> None:
    assert settings_from_mapping({}).auth.oidc is None
    oidc = settings_from_mapping(_oidc(cliClientId="devbox-cli")).auth.oidc
    assert oidc is not None
    assert (oidc.issuer, oidc.audience, oidc.cli_client_id) == (
        "https://id.example.com/realms/ml",
        "devboxes",
        "devbox-cli",
    )
    assert (oidc.username_claim, oidc.groups_claim) == ("preferred_username", "groups")


@pytest.mark.parametrize("host", ["127.0.0.1:5556", "localhost", "[::1]:8080"])
def test_plain_http_is_allowed_for_a_loopback_issuer(host: str) -> None:
    oidc = settings_from_mapping(_oidc(issuer=f"http://{host}")).auth.oidc
    assert oidc is not None
    assert oidc.issuer == f"http://{host}"


@pytest.mark.parametrize(
    ("issuer", "message"),
    [
        (
            "http://id.example.com",
            "auth.oidc.issuer: 'http://id.example.com' must use https: tokens and keys from a "
            "plain-HTTP issuer can be forged on the way (plain http is allowed for a loopback "
            "host only)",
        ),
        (
            "id.example.com",
            "auth.oidc.issuer: 'id.example.com' is not an issuer URL: use https://<host>[/<path>]",
        ),
        (
            "https://id.example.com/?tenant=a",
            "auth.oidc.issuer: 'https://id.example.com/?tenant=a' must not carry a query or a "
            "fragment",
        ),
        (
            "https://user:pw@id.example.com",
            "auth.oidc.issuer: must not carry credentials (user:password@)",
        ),
        ("https://[id.example.com", "auth.oidc.issuer: 'https://[id.example.com' is not a URL"),
    ],
)
def test_a_bad_issuer_is_refused_with_the_reason(issuer: str, message: str) -> None:
    found = _violations(_oidc(issuer=issuer))
    assert len(found) == 1, found
    assert found[0].startswith(message), found


def test_issuer_and_audience_are_required_and_claims_not_empty() -> None:
    found = _violations({"auth": {"oidc": {"usernameClaim": "", "cliClientId": ""}}})
    assert sorted(line.split(":", 1)[0] for line in found) == [
        "auth.oidc.audience",
        "auth.oidc.cliClientId",
        "auth.oidc.issuer",
        "auth.oidc.usernameClaim",
    ]
