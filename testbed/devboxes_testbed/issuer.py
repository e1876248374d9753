"""The testbed's OpenID provider: a real OIDC issuer on loopback with demo people, and the
browser steps a person takes to log in to it, driven over HTTP.

The provider is the zitadel/oidc example provider built from the Go module proxy
(testbed/go/issuer): its login form, authorization code flow with PKCE and device
authorization grant are the real ones. Tokens come from logging in as a browser would,
never from signing claims here.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import subprocess
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from .build import ensure_issuer
from .errors import TestbedError
from .process import StoppedAtExit

# The public client that `devbox login` and the tests use.
CLI_CLIENT_ID = "devbox-cli"
# Registered for the client; a native client's loopback redirect may use any port.
REDIRECT_URI = "http://127.0.0.1/callback"
START_SECONDS = 30.0


@dataclass(frozen=True)
class Person:
    username: str
    groups: tuple[str, ...]


# Two people of two teams and one admin, as `make up` offers them.
DEMO_PEOPLE = (
    Person("alice", ("ml",)),
    Person("bob", ("vision",)),
    Person("olivia", ("gpu-admins",)),
)


class Issuer(StoppedAtExit):
    """One provider process on 127.0.0.1. Stopped, it keeps its port, so starting it again
    serves the same issuer URL (with a new signing key, as a provider that lost its keys)."""

    def __init__(
        self,
        workdir: Path,
        people: tuple[Person, ...] = DEMO_PEOPLE,
        lifetime: str = "1h",
        port: int = 0,
    ) -> None:
        self.workdir = workdir
        self.people = people
        # Of access tokens, as Go writes durations ("1h", "-5m": expired when issued).
        self.lifetime = lifetime
        self.port = port
        # Random per provider: nothing outside this object logs in as the demo people.
        self.passwords = {p.username: secrets.token_urlsafe(16) for p in people}
        self._process: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        if not self.port:
            raise TestbedError("the issuer has not been started")
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Issuer:
        binary = ensure_issuer()
        self.workdir.mkdir(parents=True, exist_ok=True)
        people_file = self.people_file
        people = {
            p.username: {"password": self.passwords[p.username], "groups": list(p.groups)}
            for p in self.people
        }
        # Created 0600: the file holds the passwords.
        descriptor = os.open(people_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            json.dump(people, out)
        people_file.chmod(0o600)
        command = [
            str(binary),
            f"--listen=127.0.0.1:{self.port}",
            f"--people={people_file}",
            f"--client-id={CLI_CLIENT_ID}",
            f"--token-lifetime={self.lifetime}",
        ]
        with self.log.open("a") as log:
            self._process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
        assert self._process.stdout is not None
        first = self._process.stdout.readline().split()
        if first[:1] != ["listening"]:
            self.stop()
            raise TestbedError(f"the issuer did not start; see {self.log}")
        self.port = int(first[1].rsplit(":", 1)[1])
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.discovery_url, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise TestbedError(f"the issuer at {self.url} did not answer within {START_SECONDS}s")

    def exit_code(self) -> int | None:
        """The provider process's exit code once it has exited unasked, else None."""
        return None if self._process is None else self._process.poll()

    @property
    def people_file(self) -> Path:
        """The provider's people with their passwords (mode 0600), to log in by hand."""
        return self.workdir / "issuer-people.json"

    @property
    def log(self) -> Path:
        return self.workdir / "issuer.log"

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._process = None

    def __enter__(self) -> Issuer:
        return self.start()

    @property
    def discovery_url(self) -> str:
        return f"{self.url}/.well-known/openid-configuration"

    def discovery(self) -> dict[str, Any]:
        answer: dict[str, Any] = httpx.get(self.discovery_url, timeout=10).raise_for_status().json()
        return answer

    def token_for(self, username: str) -> str:
        """Log in as ``username`` by the authorization code flow with PKCE, as a browser
        and `devbox login` would; the access token (a JWT)."""
        token: str = self.tokens_for(username)["access_token"]
        return token

    def tokens_for(self, username: str, nonce: str | None = None) -> dict[str, Any]:
        """The issuer's whole token answer of such a login (the access token, and the ID
        token that carries ``nonce`` when one is given)."""
        password = self._password(username)
        endpoints = self.discovery()
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        redirect = "http://127.0.0.1:8765/callback"
        state = secrets.token_urlsafe(16)
        with httpx.Client(follow_redirects=False, timeout=10) as browser:
            answer = browser.get(
                endpoints["authorization_endpoint"],
                params={
                    "client_id": CLI_CLIENT_ID,
                    "redirect_uri": redirect,
                    "response_type": "code",
                    "scope": "openid profile",
                    "code_challenge": challenge.rstrip(b"=").decode(),
                    "code_challenge_method": "S256",
                    "state": state,
                    **({} if nonce is None else {"nonce": nonce}),
                },
            )
            login_page = urllib.parse.urljoin(self.url, _location(answer))
            request_id = _query(login_page, "authRequestID")
            # The login form posts to /login/username with the request's id.
            answer = browser.post(
                urllib.parse.urljoin(self.url, "/login/username"),
                data={"id": request_id, "username": username, "password": password},
            )
            answer = browser.get(urllib.parse.urljoin(self.url, _location(answer)))
            back = _location(answer)
            if _query(back, "state") != state:
                raise TestbedError("the issuer answered with another login's state")
            answer = browser.post(
                endpoints["token_endpoint"],
                data={
                    "grant_type": "authorization_code",
                    "code": _query(back, "code"),
                    "redirect_uri": redirect,
                    "client_id": CLI_CLIENT_ID,
                    "code_verifier": verifier,
                },
            )
        if answer.status_code != 200:
            raise TestbedError(f"the issuer refused the code: {answer.text[:200]}")
        tokens: dict[str, Any] = answer.json()
        return tokens

    def approve_device(self, user_code: str, username: str) -> None:
        """Do what a person does on the verification page: log in and allow the device."""
        with httpx.Client(base_url=self.url, follow_redirects=False, timeout=10) as browser:
            answer = browser.post(
                "/device/login",
                data={
                    "user_code": user_code,
                    "username": username,
                    "password": self._password(username),
                },
            )
            if answer.status_code != 200:
                raise TestbedError(f"the device login failed: {_location(answer)}")
            answer = browser.get("/device/confirm", params={"action": "allowed"})
            if answer.status_code != 200 or "allowed" not in answer.text:
                raise TestbedError(f"the device was not allowed: {answer.text[:200]}")

    def _password(self, username: str) -> str:
        try:
            return self.passwords[username]
        except KeyError:
            raise TestbedError(f"the issuer knows no person {username!r}") from None


def _location(answer: httpx.Response) -> str:
    if not answer.is_redirect:
        raise TestbedError(f"the issuer answered {answer.status_code}: {answer.text[:200]}")
    return answer.headers["location"]


def _query(url: str, name: str) -> str:
    values = urllib.parse.parse_qs(urllib.parse.urlparse(url).query).get(name)
    if not values:
        raise TestbedError(f"the issuer's redirect has no {name}")
    return values[0]
