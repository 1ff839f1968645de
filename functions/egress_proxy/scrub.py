"""A secret's value out of a response before it reaches the session (pure).

The proxy adds a credential header rendered from the tenant's secrets; a server that echoes it
(in a header, a JSON body, an error page, a status line) must not hand it to the session. Each
secret value is replaced in the raw bytes with REPLACEMENT, together with the forms the redaction
catalogue knows for a registered value (base64, URL-safe base64, percent-encoded, hex:
`value_forms`), its JSON-escaped form, and the forms an echoing server is next most likely to
produce: upper-case hex, UTF-16 (either byte order), and the base64 of the value inside a longer
base64 text (`aligned_base64`). The value itself is always replaced, whatever its length; a
derived form only when it is at least MIN_VALUE_FORM_BYTES long.

What no scrubbing can catch is a part of the value (an API that echoes the first half of a token):
a response never holds the value, so it is never replaced. docs/egress.md says so.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
from collections.abc import Iterable

from sandbox_common.redaction.catalogue import MIN_VALUE_FORM_BYTES, REPLACEMENT, value_forms

REPLACEMENT_BYTES = REPLACEMENT.encode("ascii")


def aligned_base64(raw: bytes) -> set[bytes]:
    """The base64 (standard and URL-safe) of `raw` wherever it starts inside a longer text: base64
    encodes 3 bytes as 4 characters, so the characters that depend on `raw` alone are those of its
    whole 3-byte groups, counted from its first, second or third byte."""
    forms: set[bytes] = set()
    for skip in range(3):
        rest = raw[skip:]
        whole = len(rest) // 3 * 4
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            forms.add(encode(rest)[:whole])
    return forms


def secret_forms(value: str) -> set[bytes]:
    raw = value.encode("utf-8", "surrogatepass")
    derived = {f.encode("utf-8", "surrogatepass") for f in value_forms(value)}
    derived.add(json.dumps(value)[1:-1].encode("utf-8"))
    derived.add(binascii.hexlify(raw).upper())
    derived |= aligned_base64(raw)
    for codec in ("utf-16-le", "utf-16-be"):
        derived.add(value.encode(codec, "surrogatepass"))
    return {raw} | {f for f in derived if len(f) >= MIN_VALUE_FORM_BYTES}


class Scrubber:
    def __init__(self, values: Iterable[str]) -> None:
        forms: set[bytes] = set()
        for value in values:
            if value:
                forms |= secret_forms(value)
        ordered = sorted(forms, key=lambda f: (-len(f), f))  # longest first: no partial replacement
        self._pattern = re.compile(b"|".join(re.escape(f) for f in ordered)) if ordered else None

    @property
    def active(self) -> bool:
        return self._pattern is not None

    def bytes(self, data: bytes) -> tuple[bytes, int]:
        """`data` with every form replaced, and how many were."""
        if self._pattern is None or not data:
            return data, 0
        return self._pattern.subn(REPLACEMENT_BYTES, data)

    def text(self, value: str) -> tuple[str, int]:
        out, count = self.bytes(value.encode("utf-8", "surrogateescape"))
        return (out.decode("utf-8", "surrogateescape") if count else value), count


@functools.lru_cache(maxsize=256)
def scrubber_for(values: tuple[str, ...]) -> Scrubber:
    """The scrubber of these values, made once (its pattern is compiled per set of values, not
    per request)."""
    return Scrubber(values)
