"""Redaction (docs/redaction.md): the token-shape catalogue and what is generated from it.

`catalogue` is stdlib-only and is the single source of truth; `stdio` ships it into the sandbox,
`cloudwatch` turns it into data protection identifiers and the subscription-filter pattern,
`findings` says where a text's tokens sit (the backstop's findings).
"""

from .catalogue import (
    CLASS_NAMES,
    HOLD_CHARS,
    REPLACEMENT,
    TOKEN_CLASSES,
    Redactor,
    TokenClass,
    redact,
    redact_bytes,
)
from .findings import Hit, fingerprint, scan

__all__ = [
    "CLASS_NAMES",
    "REPLACEMENT",
    "TOKEN_CLASSES",
    "Hit",
    "Redactor",
    "TokenClass",
    "fingerprint",
    "HOLD_CHARS",
    "redact",
    "redact_bytes",
    "scan",
]
