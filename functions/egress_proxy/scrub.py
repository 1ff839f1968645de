"""A secret's value out of a response before it reaches the session (pure).

The proxy adds a credential header rendered from the tenant's secrets; a server that echoes it
(in a header, a JSON body, an error page) must not hand it to the session. Each secret value is
replaced in the raw bytes with REPLACEMENT, together with the forms the redaction catalogue knows
for a registered value (base64, URL-safe base64, percent-encoded, hex: `value_forms`) and its
JSON-escaped form; the value itself is always replaced, whatever its length.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from sandbox_common.redaction.catalogue import REPLACEMENT, value_forms

REPLACEMENT_BYTES = REPLACEMENT.encode("ascii")


class Scrubber:
    def __init__(self, values: Iterable[str]) -> None:
        forms: set[bytes] = set()
        for value in values:
            if not value:
                continue
            forms.add(value.encode("utf-8", "surrogatepass"))
            forms.add(json.dumps(value)[1:-1].encode("utf-8"))
            forms |= {f.encode("utf-8", "surrogatepass") for f in value_forms(value)}
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
