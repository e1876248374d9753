"""`devbox login` through the OpenID Connect issuer, on the routes the Devboxes CLI uses;
the dashboard's sign-in (web/dashboard.py) shares the steps at the issuer.

The CLI opens ``/auth/cli/authorize`` with its PKCE challenge, state and loopback
redirect; the controller sends the browser on to the issuer as its configured public
client, and the issuer sends the browser back to the CLI's loopback with a code. The CLI
then posts the code and its verifier to ``/api/v1/auth/cli/token``, where the controller
redeems them at the issuer and checks the access token as it will check every request,
so a misconfiguration shows at login rather than at the first command. Neither route
needs a credential: the PKCE verifier, which never leaves the CLI before the redemption,
is the proof.

Where no browser runs beside the CLI (an SSH session, a notebook's terminal), the device
flow (RFC 8628) goes through the controller too: ``/api/v1/auth/cli/device`` starts it at
the issuer, the person enters the code shown on any browser, and the CLI polls the token
route with the device code, answered 202 until the person approves; the device code,
worth nothing until the person approves it at the issuer, is the proof there.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
import urllib.parse
from dataclasses import dataclass
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from devboxes_sdk.models import API_PREFIX

from ...config.auth import OidcSettings
from ...k8s.kube import ApiProblem
from .base import Identity, IdentityUnavailable, Unauthorized
from .oidc import OidcVerifier

AUTHORIZE_PATH = "/auth/cli/authorize"
TOKEN_PATH = f"{API_PREFIX}/auth/cli/token"
DEVICE_PATH = f"{API_PREFIX}/auth/cli/device"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
# Under /api/v1 but before the CLI has a credential.
LOGIN_PATHS = (TOKEN_PATH, DEVICE_PATH)
CALLBACK_PATH = "/callback"
SCOPE = "openid profile"
# RFC 7636: 43 to 128 characters of the unreserved set.
_PKCE = re.compile(r"^[A-Za-z0-9._~-]{43,128}$")
_STATE = re.compile(r"^[A-Za-z0-9._~-]{16,256}$")
# Issuers choose their codes' format (some are JWE, with dots); printable ASCII, bounded.
CODE = re.compile(r"^[\x21-\x7e]{1,4096}$")
MAX_ISSUER_TEXT = 200

router = APIRouter()


class BadLogin(ApiProblem):
    def __init__(self, detail: str) -> None:
        super().__init__(400, detail)


class CliTokenRequest(BaseModel):
    """What the CLI posts to redeem its code (the Devboxes CLI's field names), or to ask
    whether its device login was approved."""

    model_config = ConfigDict(extra="ignore")

    grant_type: str = "authorization_code"
    code: str | None = None
    code_verifier: str | None = None
    redirect_uri: str | None = None
    device_code: str | None = None
    # The CLI's name for itself; the issuer is always asked as the configured client.
    client_id: str | None = None


class DeviceLogin(BaseModel):
    """A device login under way (RFC 8628): the person opens ``verification_uri`` and
    enters ``user_code``; the CLI polls with ``device_code`` every ``interval`` seconds."""

    model_config = ConfigDict(extra="ignore")

    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str | None = None
    expires_in: int
    interval: int = 5


class CliTokenResponse(BaseModel):
    access_token: str
    token_type: str = "Bearer"  # noqa: S105 - the OAuth token type, not a secret
    expires_in: int
    scope: str
    # Who the token names, as the API will see it: the CLI shows it without another call.
    user: str
    groups: list[str]


def login_settings(request: Request) -> tuple[OidcSettings, str, OidcVerifier]:
    """The OIDC settings, the CLI's client ID and the issuer's verifier, or a 404 saying
    why this controller offers no login."""
    oidc = request.app.state.store.settings.auth.oidc
    # The verifier that checks every request's token: the login shares its cached keys.
    verifier = next((v for v in request.app.state.verifiers if isinstance(v, OidcVerifier)), None)
    if oidc is None or oidc.cli_client_id is None or verifier is None:
        raise ApiProblem(
            404,
            "this controller offers no OIDC login (auth.oidc.cliClientId is not set); "
            "use a token: devbox login --token",
        )
    return oidc, oidc.cli_client_id, verifier


def _loopback_redirect(uri: str) -> str:
    try:
        parts = urllib.parse.urlsplit(uri)
        port = parts.port
        address = ipaddress.ip_address(parts.hostname or "")
    except ValueError:
        address, port, parts = None, None, None
    if (
        parts is None
        or address is None
        or not address.is_loopback
        or parts.scheme != "http"
        or port is None
        or parts.path != CALLBACK_PATH
        or parts.query
        or parts.fragment
        or parts.username is not None
    ):
        raise BadLogin(
            f"redirect_uri must be http://127.0.0.1:<port>{CALLBACK_PATH} (a loopback "
            "address with a port), where the CLI listens"
        )
    return uri


@router.get(AUTHORIZE_PATH, include_in_schema=False)
async def authorize(
    request: Request,
    response_type: Annotated[str, Query()] = "",
    redirect_uri: Annotated[str, Query()] = "",
    state: Annotated[str, Query()] = "",
    code_challenge: Annotated[str, Query()] = "",
    code_challenge_method: Annotated[str, Query()] = "",
) -> RedirectResponse:
    _, client_id, verifier = login_settings(request)
    if response_type != "code":
        raise BadLogin("response_type must be code")
    if code_challenge_method != "S256" or not _PKCE.fullmatch(code_challenge):
        raise BadLogin("a PKCE code_challenge with code_challenge_method S256 is required")
    if not _STATE.fullmatch(state):
        raise BadLogin("state must be 16 to 256 URL-safe characters")
    return RedirectResponse(
        await issuer_authorize_url(
            verifier, client_id, _loopback_redirect(redirect_uri), state, code_challenge
        ),
        status_code=302,
    )


@router.post(DEVICE_PATH, include_in_schema=False)
async def device(request: Request) -> DeviceLogin:
    _, client_id, verifier = login_settings(request)
    endpoint = await verifier.published("device_authorization_endpoint")
    if endpoint is None:
        raise ApiProblem(
            404,
            f"the OIDC issuer {verifier.issuer} offers no device login; "
            "use devbox login --oidc without --device",
        )
    started = await _post(verifier, endpoint, {"client_id": client_id, "scope": SCOPE})
    if started.status_code != 200:
        raise ApiProblem(
            502, f"the issuer refused to start a device login: {_issuer_error(_json(started))}"
        )
    try:
        return DeviceLogin.model_validate(_json(started))
    except ValidationError:
        raise ApiProblem(
            502, f"the OIDC issuer {verifier.issuer} answered the device login incompletely"
        ) from None


@router.post(TOKEN_PATH, include_in_schema=False, response_model=None)
async def token(request: Request, body: CliTokenRequest) -> CliTokenResponse | JSONResponse:
    _, client_id, verifier = login_settings(request)
    form = {"grant_type": body.grant_type, "client_id": client_id, **_grant(body)}
    try:
        redeemed = await redeem(verifier, form)
    except IssuerRefused as refused:
        if body.grant_type == DEVICE_GRANT and refused.error in (
            "authorization_pending",
            "slow_down",
        ):
            # RFC 8628: keep polling, five seconds slower after slow_down.
            return JSONResponse({"status": refused.error}, status_code=202)
        raise
    return CliTokenResponse(
        access_token=redeemed.access_token,
        expires_in=redeemed.expires_in,
        scope=redeemed.scope,
        user=redeemed.person.user,
        groups=list(redeemed.person.groups),
    )


def pkce_challenge(code_verifier: str) -> str:
    """The S256 challenge of a PKCE verifier (RFC 7636)."""
    digest = hashlib.sha256(code_verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


async def issuer_authorize_url(
    verifier: OidcVerifier,
    client_id: str,
    redirect_uri: str,
    state: str,
    challenge: str,
    nonce: str | None = None,
) -> str:
    """Where a browser signs in at the issuer, as the public client, with PKCE; both the
    CLI's login and the dashboard's send the browser there. The dashboard, which keeps
    the ID token's word on who signed in, also sends a ``nonce`` for it to carry."""
    fields = {
        "client_id": client_id,
        "response_type": "code",
        "scope": SCOPE,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    if nonce is not None:
        fields["nonce"] = nonce
    query = urllib.parse.urlencode(fields)
    endpoint = await verifier.endpoint("authorization_endpoint")
    separator = "&" if "?" in endpoint else "?"
    return f"{endpoint}{separator}{query}"


@dataclass(frozen=True)
class Redeemed:
    access_token: str
    expires_in: int
    scope: str
    person: Identity
    id_token: str | None


class IssuerRefused(BadLogin):
    """The issuer's token endpoint refused the grant; ``error`` is its OAuth error code."""

    def __init__(self, answer: dict[str, Any]) -> None:
        error = answer.get("error")
        self.error = error if isinstance(error, str) else None
        super().__init__(f"the issuer refused the login: {_issuer_error(answer)}")


async def redeem(verifier: OidcVerifier, form: dict[str, str]) -> Redeemed:
    """Redeem a grant at the issuer's token endpoint and check the access token as every
    request's is checked, so a misconfiguration shows at login rather than at first use.

    Raises :class:`IssuerRefused` when the issuer refuses the grant (a replayed or
    forged code, a wrong PKCE verifier), 502 for an answer this controller cannot use."""
    endpoint = await verifier.endpoint("token_endpoint")
    answer = await _post(verifier, endpoint, form)
    redeemed = _json(answer)
    if answer.status_code != 200:
        raise IssuerRefused(redeemed)
    access_token = redeemed.get("access_token")
    if not isinstance(access_token, str):
        raise ApiProblem(502, f"the OIDC issuer {verifier.issuer} answered without an access token")
    try:
        person = await verifier.identify(access_token)
    except Unauthorized as refused:
        raise ApiProblem(
            502,
            f"the issuer's token is not accepted by this controller ({refused.detail}); "
            "check auth.oidc against the issuer's client settings",
        ) from None
    if person is None:
        raise ApiProblem(
            502, "the issuer's access token is not a JWT; configure the client for JWTs"
        )
    expires_in = redeemed.get("expires_in")
    return Redeemed(
        access_token=access_token,
        expires_in=expires_in if isinstance(expires_in, int) and expires_in > 0 else 0,
        scope=str(redeemed.get("scope") or SCOPE),
        person=person,
        id_token=id_token if isinstance(id_token := redeemed.get("id_token"), str) else None,
    )


def _grant(body: CliTokenRequest) -> dict[str, str]:
    """The grant's own fields for the issuer, checked."""
    if body.grant_type == DEVICE_GRANT:
        if body.device_code is None or not CODE.fullmatch(body.device_code):
            raise BadLogin("device_code must be the one /api/v1/auth/cli/device answered")
        return {"device_code": body.device_code}
    if body.grant_type != "authorization_code":
        raise BadLogin(f"grant_type must be authorization_code or {DEVICE_GRANT}")
    if body.code is None or not CODE.fullmatch(body.code):
        raise BadLogin("code must be the code the issuer sent to the CLI's redirect_uri")
    if body.code_verifier is None or not _PKCE.fullmatch(body.code_verifier):
        raise BadLogin("code_verifier must be 43 to 128 characters (RFC 7636)")
    return {
        "code": body.code,
        "code_verifier": body.code_verifier,
        "redirect_uri": _loopback_redirect(body.redirect_uri or ""),
    }


async def _post(verifier: OidcVerifier, url: str, form: dict[str, str]) -> httpx.Response:
    try:
        return await verifier.client.post(url, data=form)
    except httpx.HTTPError as error:
        raise IdentityUnavailable(
            f"the OIDC issuer {verifier.issuer} cannot be reached ({type(error).__name__}); "
            "try again later"
        ) from None


def _json(answer: httpx.Response) -> dict[str, Any]:
    try:
        body = answer.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _issuer_error(body: dict[str, Any]) -> str:
    error = str(body.get("error") or "no reason given")
    description = body.get("error_description")
    text = f"{error}: {description}" if isinstance(description, str) else error
    return text[:MAX_ISSUER_TEXT]
