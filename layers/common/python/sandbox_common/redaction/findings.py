"""What the host reports of a text without keeping a token: where each token sits (`scan`: its
class and the span of its secret part) and a fingerprint that correlates findings.

The backstop builds its findings from these. Host side only (the catalogue, which the session
runs too, stays free of it); the scan runs the catalogue's prefilter and alternation, so it finds
exactly what `catalogue.redact` replaces.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .catalogue import alternation, candidate_classes


@dataclass(frozen=True)
class Hit:
    """Where a token sits in the scanned text: class and span only, never the token itself."""

    token_class: str
    start: int
    end: int


def scan(text: str) -> list[Hit]:
    """Every token-shaped span in `text` (positions of the secret part only)."""
    names = candidate_classes(text)
    if not names:
        return []
    hits = []
    for m in alternation(names).finditer(text):
        name = m.lastgroup
        if name is not None:  # always: every alternative is one named group
            hits.append(Hit(name, m.start(name), m.end(name)))
    return hits


def fingerprint(token: str) -> str:
    """First 12 hex chars of SHA-256: lets a finding be correlated without storing the token."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:12]
