"""Exceptions raised by the SDK, all rooted at :class:`DevboxesError`.

Importing this module loads neither pydantic nor the models: what ssh runs on every
login (``devbox ssh --stdio``) raises and reports these errors and must start fast. The
few functions that need the models import them when called.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError as PydanticValidationError

    from devboxes_sdk.client import Devbox
    from devboxes_sdk.models import FieldError

# Bodies that are not JSON (a proxy's HTML page, say) are cut to this many characters
# so that an error message stays one readable line.
_MAX_TEXT_DETAIL = 200

# FastAPI prefixes the location of every body field with "body", which does not help a
# reader.
_LOC_PREFIXES = frozenset({"body"})


class DevboxesError(Exception):
    """Base class of every error the SDK raises."""


class ConfigurationError(DevboxesError):
    """The URL, token or configuration file cannot be used."""


class NotConfigured(ConfigurationError):
    """No URL or no token was found anywhere; ``setting`` is ``"url"`` or ``"token"``.

    Separate from other configuration errors so that a front end (the CLI) can tell
    its users how to supply the setting in its own words.
    """

    def __init__(self, setting: str, message: str) -> None:
        self.setting = setting
        super().__init__(message)


class ApiError(DevboxesError):
    """The API answered with an error status (or could not be reached).

    ``status`` is the HTTP status code (``None`` when no response arrived) and
    ``detail`` the server's explanation.
    """

    def __init__(self, status: int | None, detail: str) -> None:
        self.status = status
        self.detail = detail
        super().__init__(status, detail)

    def __str__(self) -> str:
        if self.status is None:
            return self.detail
        return f"Devboxes API returned {self.status}: {self.detail}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status!r}, detail={self.detail!r})"


class AuthenticationError(ApiError):
    """401: the token is missing, wrong or expired."""


class PermissionDenied(ApiError):
    """403: the token is valid but not allowed to do this (or a quota refused it)."""


class NotFound(ApiError):
    """404: no such box (or route)."""


class Conflict(ApiError):
    """409: a box with this name already exists, or a concurrent change won."""


class ValidationError(ApiError):
    """422: the request broke a rule; ``errors`` lists every violation.

    Raised both for the server's 422 and for bodies the SDK refuses before sending
    (``local`` is then true).
    """

    def __init__(self, errors: Sequence[FieldError], *, local: bool = False) -> None:
        self.errors = list(errors)
        self.local = local
        super().__init__(422, format_field_errors(self.errors))

    def __str__(self) -> str:
        if self.local:
            return f"invalid request: {self.detail}"
        return super().__str__()

    @classmethod
    def from_pydantic(cls, error: PydanticValidationError) -> ValidationError:
        """Turn a local pydantic failure into the shape the server uses for 422."""
        from devboxes_sdk.models import field_errors

        return cls(field_errors(error.errors(), "body"), local=True)


class ListExpired(ApiError):
    """410: the continue token of a paged list can no longer be honoured; the list has
    to start again."""


class Unavailable(ApiError):
    """503, or the API could not be reached at all (then ``status`` is ``None``)."""


class NotADevboxesServer(ApiError):
    """The server at ``url`` answered, but not as a Devboxes controller does: an HTML
    page or another non-JSON body, or a redirect. The URL leads to another server (a
    Jupyter server, a proxy's page); the fix is the controller's base URL."""

    def __init__(self, url: str, status: int, detail: str) -> None:
        self.url = url
        super().__init__(status, detail)

    def __str__(self) -> str:
        # Not "Devboxes API returned ...": the point is that it is not the API.
        return self.detail


class BoxNotReady(DevboxesError):
    """Base of the errors :meth:`Client.wait_ready` raises when a box will not be ready.

    ``box`` is the last observed box, ``state`` and ``message`` its last state and message,
    ``reason`` the one line it shows for why it is not ready: the controller's summary (a
    free count and a place in line) when there is one, else the message.
    """

    def __init__(self, box: Devbox, text: str) -> None:
        from devboxes_sdk import labels

        self.box = box
        self.state = box.state
        self.message = box.message
        self.reason = labels.reason(box.summary, box.message)
        super().__init__(text)


class StartTimeout(BoxNotReady, TimeoutError):
    """The box was not ready before the timeout; ``reason`` says what it waits for."""

    def __init__(self, box: Devbox, timeout: float) -> None:
        from devboxes_sdk import labels

        self.timeout = timeout
        status = labels.status_line(box.state, labels.reason(box.summary, box.message))
        super().__init__(box, f"{box.name} was not ready within {timeout:g}s ({status})")


class BoxDegraded(BoxNotReady):
    """The box entered the ``degraded`` state; ``message`` carries the reason."""

    def __init__(self, box: Devbox) -> None:
        reason = box.message or "no reason reported"
        super().__init__(box, f"{box.name} is degraded: {reason}")


class BoxStopped(BoxNotReady):
    """The box was stopped (by a user or its TTL) while waiting for it to be ready."""

    def __init__(self, box: Devbox) -> None:
        super().__init__(box, f"{box.name} is stopped; start it before waiting for it")


def format_field_errors(errors: Sequence[FieldError]) -> str:
    """One line naming every violated rule, e.g. ``name: invalid name 'A'; ...``."""
    parts = []
    for error in errors:
        loc = list(error.loc)
        if loc and loc[0] in _LOC_PREFIXES:
            loc = loc[1:]
        where = ".".join(str(part) for part in loc)
        parts.append(f"{where}: {error.msg}" if where else error.msg)
    return "; ".join(parts) if parts else "the request was rejected"


_STATUS_ERRORS: Mapping[int, type[ApiError]] = {
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    410: ListExpired,
    503: Unavailable,
}


def _field_errors(items: Sequence[object]) -> list[FieldError] | None:
    from pydantic import ValidationError as PydanticValidationError

    from devboxes_sdk.models import FieldError

    errors = []
    for item in items:
        if not isinstance(item, Mapping):
            return None
        try:
            errors.append(FieldError.model_validate(item))
        except PydanticValidationError:
            return None
    return errors


def _text_detail(text: str, reason: str) -> str:
    one_line = " ".join(text.split())
    if not one_line:
        return reason or "no details"
    if len(one_line) > _MAX_TEXT_DETAIL:
        return one_line[: _MAX_TEXT_DETAIL - 1] + "…"
    return one_line


def error_from_body(status: int, body: object, *, text: str = "", reason: str = "") -> ApiError:
    """Build the error for an HTTP error response.

    ``body`` is the decoded JSON (``None`` when the body was not JSON), ``text`` the raw
    body and ``reason`` the HTTP reason phrase, used when the body says nothing.
    """
    detail_value = body.get("detail") if isinstance(body, Mapping) else None
    if isinstance(detail_value, list):
        errors = _field_errors(detail_value)
        if errors is not None:
            if status == 422:
                return ValidationError(errors)
            detail = format_field_errors(errors)
        else:
            detail = _text_detail(str(detail_value), reason)
    elif isinstance(detail_value, str) and detail_value.strip():
        detail = detail_value.strip()
    elif detail_value is not None:
        detail = _text_detail(str(detail_value), reason)
    else:
        detail = _text_detail(text, reason)
    if status == 422:
        from devboxes_sdk.models import FieldError

        return ValidationError([FieldError(type="value_error", loc=[], msg=detail)])
    return _STATUS_ERRORS.get(status, ApiError)(status, detail)
