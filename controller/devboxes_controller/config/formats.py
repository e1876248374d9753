"""Kubernetes value formats the settings use: names, labels, quantities, images, resources.

Each format is a pydantic type whose failure says what the value should look like, in
the words of the Kubernetes documentation, so that a bad value is refused at start-up
rather than by the apiserver on a user's create. Each also carries the JSON Schema of what
its validator checks, from the same patterns, for the chart's generated values schema
(:mod:`.chart_schema`).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated

from pydantic import AfterValidator, StrictStr, WithJsonSchema
from pydantic.config import JsonDict

from .violations import fail

MAX_IMAGE_LENGTH = 512
MAX_URL_LENGTH = 512

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_DNS_SUBDOMAIN = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"
_QUALIFIED_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_DNS_LABEL_RE = re.compile(rf"^{_DNS_LABEL}$")
_DNS_SUBDOMAIN_RE = re.compile(rf"^{_DNS_SUBDOMAIN}$")
_QUALIFIED_NAME_RE = re.compile(rf"^{_QUALIFIED_NAME}$")
# Narrower than Kubernetes, which also takes exponents, signs and the suffixes n and u:
# only the forms operators write in values files pass.
_QUANTITY_RE = re.compile(r"^([0-9]+(\.[0-9]+)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
# What each suffix multiplies by: powers of 1000, or of 1024 for the binary ones.
_SUFFIX_FACTORS = {
    "m": Decimal(1000) ** -1,
    **{prefix: Decimal(1000) ** power for power, prefix in enumerate("kMGTPE", start=1)},
    **{f"{prefix}i": Decimal(1024) ** power for power, prefix in enumerate("KMGTPE", start=1)},
}
_ENV_NAME_RE = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_URL_RE = re.compile(r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
_WHITESPACE_RE = re.compile(r"\s")
# A digest, or a tag in the last path component (a registry's ":port" is followed by "/").
_DIGEST = r"@[A-Za-z0-9_+.-]+:[0-9a-fA-F]{32,}"
_PINNED_RE = re.compile(rf"({_DIGEST}|:[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})$")
_LATEST_RE = re.compile(r":latest$")
# IANA_SVC_NAME, the rule of a container port's name: this, with a letter and no "--".
_PORT_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$")

# Kubernetes reserves these domains for its own resource names and labels.
_RESERVED_DOMAINS = ("kubernetes.io", "k8s.io")
# Kubernetes checks extended resources again as "requests.<name>" for quotas, so the
# prefix must leave room for those nine characters within a 253-character subdomain.
_QUOTA_PREFIX = "requests."
_MAX_RESOURCE_PREFIX = 253 - len(_QUOTA_PREFIX)


def _dns_label_problem(value: str) -> str | None:
    if len(value) > 63 or not _DNS_LABEL_RE.fullmatch(value):
        return (
            f"{value!r} is not a valid DNS label: 1-63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return None


def _dns_subdomain_problem(value: str) -> str | None:
    if len(value) > 253 or not _DNS_SUBDOMAIN_RE.fullmatch(value):
        return (
            f"{value!r} is not a valid DNS subdomain: at most 253 characters of "
            "dot-separated DNS labels (lowercase letters, digits and '-')"
        )
    return None


def _qualified_name_problem(value: str, what: str) -> str | None:
    prefix, slash, name = value.rpartition("/")
    if slash and (not prefix or _dns_subdomain_problem(prefix)):
        return f"{value!r} is not a valid {what}: the prefix before '/' must be a DNS subdomain"
    if not _QUALIFIED_NAME_RE.fullmatch(name):
        return (
            f"{value!r} is not a valid {what}: the name must be 1-63 letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit"
        )
    return None


def _check_dns_label(value: str) -> str:
    problem = _dns_label_problem(value)
    if problem:
        raise fail(problem)
    return value


def _check_dns_subdomain(value: str) -> str:
    problem = _dns_subdomain_problem(value)
    if problem:
        raise fail(problem)
    return value


def _check_label_key(value: str) -> str:
    problem = _qualified_name_problem(value, "label key")
    if problem:
        raise fail(problem)
    return value


def _check_label_value(value: str) -> str:
    if value and not _QUALIFIED_NAME_RE.fullmatch(value):
        raise fail(
            f"{value!r} is not a valid label value: at most 63 letters, digits, '-', '_' "
            "or '.', starting and ending with a letter or digit"
        )
    return value


def _check_image(value: str) -> str:
    if not value:
        raise fail("an image reference must not be empty")
    if len(value) > MAX_IMAGE_LENGTH:
        raise fail(f"an image reference is at most {MAX_IMAGE_LENGTH} characters")
    if "://" in value:
        raise fail(f"{value!r} is not an image reference: drop the scheme (no '://')")
    if _WHITESPACE_RE.search(value):
        raise fail(f"{value!r} is not an image reference: it contains whitespace")
    return value


def _check_pinned_image(value: str) -> str:
    _check_image(value)
    if not _PINNED_RE.search(value):
        raise fail(
            f"{value!r} is not pinned: name a tag (image:1.2.3) or a digest "
            "(image@sha256:...), so that every box of this profile runs the same image"
        )
    if _LATEST_RE.search(value):
        raise fail(f"{value!r} is not pinned: ':latest' moves; name a fixed tag or a digest")
    return value


def is_dns_label(value: str) -> bool:
    """Whether ``value`` is a DNS label: 1-63 lowercase letters, digits and '-', starting and
    ending with a letter or digit."""
    return _dns_label_problem(value) is None


def is_digest(image: str) -> bool:
    """Whether an image reference names its content by digest."""
    return re.search(f"{_DIGEST}$", image) is not None


def _check_port_name(value: str) -> str:
    if not _PORT_NAME_RE.fullmatch(value) or "--" in value or not re.search("[a-z]", value):
        raise fail(
            f"{value!r} is not a valid port name: 1-15 lowercase letters, digits and '-', "
            "with at least one letter, no '--', starting and ending with a letter or digit"
        )
    return value


def _check_resource_name(value: str) -> str:
    prefix, slash, name = value.partition("/")
    if not slash:
        raise fail(f"{value!r} is not vendor-qualified: use '<domain>/<name>', e.g. nvidia.com/gpu")
    domain_problem = _dns_subdomain_problem(prefix)
    if domain_problem:
        raise fail(f"{value!r}: the domain before '/' is invalid: {domain_problem}")
    for reserved in _RESERVED_DOMAINS:
        if prefix == reserved or prefix.endswith("." + reserved):
            raise fail(
                f"{value!r} is in the {reserved} domain, which Kubernetes reserves; "
                "use the device plugin's vendor domain, e.g. nvidia.com/gpu"
            )
    if prefix.startswith(_QUOTA_PREFIX):
        raise fail(f"{value!r} must not start with {_QUOTA_PREFIX!r}")
    if len(prefix) > _MAX_RESOURCE_PREFIX:
        raise fail(
            f"the domain of {value!r} is longer than {_MAX_RESOURCE_PREFIX} characters, "
            "which Kubernetes cannot use for an extended resource"
        )
    if not _QUALIFIED_NAME_RE.fullmatch(name):
        raise fail(
            f"{value!r}: the name after '/' must be 1-63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return value


def is_quantity(value: object) -> bool:
    """Whether ``value`` is a quantity as the settings accept it, e.g. 250m, 2 or 20Gi."""
    return isinstance(value, str) and bool(_QUANTITY_RE.fullmatch(value))


def quantity_value(value: str) -> Decimal:
    """The numeric value of a quantity that passes :func:`is_quantity` (``2Gi`` -> 2**31)."""
    match = _QUANTITY_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    number, suffix = Decimal(match.group(1)), match.group(3)
    return number if suffix is None else number * _SUFFIX_FACTORS[suffix]


def _check_quantity(value: str) -> str:
    if not is_quantity(value):
        raise fail(f"{value!r} is not a Kubernetes quantity such as 250m, 2, 512Mi or 20Gi")
    if quantity_value(value) <= 0:
        raise fail(f"{value!r} must be greater than zero")
    return value


def _check_env_name(value: str) -> str:
    if not _ENV_NAME_RE.fullmatch(value):
        raise fail(
            f"{value!r} is not a valid environment variable name: letters, digits, '-', "
            "'_' and '.', not starting with a digit"
        )
    return value


def _check_host(value: str) -> str:
    if len(value) > 253 or _WHITESPACE_RE.search(value):
        raise fail(f"{value!r} is not a host name or address")
    return value


def _check_url(value: str) -> str:
    if not _URL_RE.fullmatch(value) or len(value) > MAX_URL_LENGTH:
        raise fail(f"{value!r} is not an http:// or https:// URL without query or fragment")
    return value.rstrip("/")


def _string(keywords: JsonDict) -> WithJsonSchema:
    """The JSON Schema of a string format: what its validator checks, as far as JSON Schema
    can say it."""
    return WithJsonSchema({"type": "string", **keywords})


_RESERVED = " and ".join(_RESERVED_DOMAINS)
_RESERVED_ALTERNATIVES = "|".join(re.escape(domain) for domain in _RESERVED_DOMAINS)

DnsLabel = Annotated[
    StrictStr,
    AfterValidator(_check_dns_label),
    _string({"maxLength": 63, "pattern": _DNS_LABEL_RE.pattern}),
]
DnsSubdomain = Annotated[
    StrictStr,
    AfterValidator(_check_dns_subdomain),
    _string({"maxLength": 253, "pattern": _DNS_SUBDOMAIN_RE.pattern}),
]
# A prefix of at most 253 characters, '/', and a name of at most 63.
LabelKey = Annotated[
    StrictStr,
    AfterValidator(_check_label_key),
    _string({"maxLength": 317, "pattern": f"^({_DNS_SUBDOMAIN}/)?{_QUALIFIED_NAME}$"}),
]
LabelValue = Annotated[
    StrictStr,
    AfterValidator(_check_label_value),
    _string({"maxLength": 63, "pattern": f"^({_QUALIFIED_NAME})?$"}),
]
Image = Annotated[
    StrictStr,
    AfterValidator(_check_image),
    _string(
        {
            "description": "An image reference: no scheme, no whitespace.",
            "minLength": 1,
            "maxLength": MAX_IMAGE_LENGTH,
            "pattern": r"^[^\s]+$",
            "not": {"pattern": "://"},
        }
    ),
]
# An image that cannot change under a box: a fixed tag or a digest, never ':latest'.
PinnedImage = Annotated[
    StrictStr,
    AfterValidator(_check_pinned_image),
    _string(
        {
            "description": "A pinned image reference: no scheme, no whitespace, a tag other "
            "than 'latest' or a digest.",
            "minLength": 1,
            "maxLength": MAX_IMAGE_LENGTH,
            "pattern": r"^[^\s]+$",
            "allOf": [
                {"not": {"pattern": "://"}},
                {"description": "A tag or a digest.", "pattern": _PINNED_RE.pattern},
                {"description": "Not ':latest'.", "not": {"pattern": _LATEST_RE.pattern}},
            ],
        }
    ),
]
PortName = Annotated[
    StrictStr,
    AfterValidator(_check_port_name),
    _string(
        {
            "pattern": _PORT_NAME_RE.pattern,
            "allOf": [{"pattern": "[a-z]"}, {"not": {"pattern": "--"}}],
        }
    ),
]
ResourceName = Annotated[
    StrictStr,
    AfterValidator(_check_resource_name),
    _string(
        {
            "description": "A vendor-qualified extended resource (DNS-subdomain prefix '/' "
            f"name), outside the {_RESERVED} domains.",
            "maxLength": 317,
            "pattern": f"^{_DNS_SUBDOMAIN}/{_QUALIFIED_NAME}$",
            "allOf": [
                {
                    "description": f"Kubernetes reserves the {_RESERVED} domains.",
                    "not": {"pattern": rf"^([^/]*\.)?({_RESERVED_ALTERNATIVES})/"},
                },
                {
                    "description": f"Quotas prefix the name with {_QUOTA_PREFIX!r}, so the "
                    "domain must not start with it.",
                    "not": {"pattern": f"^{re.escape(_QUOTA_PREFIX)}"},
                },
                {
                    "description": f"The domain leaves room for the {_QUOTA_PREFIX!r} quota "
                    "prefix.",
                    "pattern": f"^[^/]{{1,{_MAX_RESOURCE_PREFIX}}}/",
                },
            ],
        }
    ),
]
Quantity = Annotated[
    StrictStr,
    AfterValidator(_check_quantity),
    _string(
        {
            "description": "A Kubernetes quantity greater than zero.",
            "pattern": _QUANTITY_RE.pattern,
            "not": {"pattern": r"^(0+(\.0*)?|\.0+)[A-Za-z]*$"},
        }
    ),
]
EnvName = Annotated[
    StrictStr, AfterValidator(_check_env_name), _string({"pattern": _ENV_NAME_RE.pattern})
]
Host = Annotated[
    StrictStr, AfterValidator(_check_host), _string({"maxLength": 253, "pattern": r"^[^\s]*$"})
]
# Trailing slashes are dropped, so that paths can be appended.
HttpUrl = Annotated[
    StrictStr,
    AfterValidator(_check_url),
    _string({"maxLength": MAX_URL_LENGTH, "pattern": _URL_RE.pattern}),
]


_CREDENTIALS_RE = re.compile(r"^[a-z]+://[^/@]*@")


def _check_url_without_credentials(value: str) -> str:
    value = _check_url(value)
    if _CREDENTIALS_RE.match(value):
        raise fail("must not carry a user name or password: messages show this URL")
    return value


# An HttpUrl that messages and logs may show.
UrlWithoutCredentials = Annotated[
    StrictStr,
    AfterValidator(_check_url_without_credentials),
    _string(
        {
            "maxLength": MAX_URL_LENGTH,
            "pattern": _URL_RE.pattern,
            "not": {"pattern": _CREDENTIALS_RE.pattern},
        }
    ),
]
