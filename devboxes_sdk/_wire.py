"""The parts of the wire contract that need no pydantic: the API prefix and the box name
rule. :mod:`devboxes_sdk.models` holds the rest of the contract and exports these too;
they live here so that what ssh runs on every login (``devbox ssh --stdio``, ``devbox
known-hosts``) can check a name and build a path without loading the models.
"""

from __future__ import annotations

import re
import unicodedata

API_PREFIX = "/api/v1"

NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"
NAME_RE = re.compile(NAME_PATTERN)
NAME_RULE = (
    "1-40 characters of lowercase letters, digits and '-', starting and ending with a "
    "letter or digit"
)
# Text fields are trimmed of exactly these characters, so that the patterns the API
# documents (in the models) describe precisely what it accepts.
BLANKS = " \t\n\r"


def normalize_name(value: str) -> str:
    """Trim and lowercase a box name, then check it, as every Devboxes client expects.

    Non-ASCII text is refused before lowercasing: ``str.lower`` turns lookalikes such as
    U+212A KELVIN SIGN into ASCII letters, which would silently pick another box.
    """
    foreign = next((char for char in value if not char.isascii()), None)
    if foreign is not None:
        raise ValueError(
            f"invalid name {value!r}: it contains the non-ASCII character "
            f"U+{ord(foreign):04X} ({unicodedata.name(foreign, 'unnamed')}); use {NAME_RULE}"
        )
    name = value.strip(BLANKS).lower()
    if not NAME_RE.fullmatch(name):
        raise ValueError(f"invalid name {value!r}: use {NAME_RULE}")
    return name
