"""Turn token: a secret the caller generates once per turn and sends on every
action of it. Dispatch keeps only its SHA-256 and compares in constant time.

Stdlib only: the agent client imports `new_token` without pydantic or Powertools.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from .naming import TURN_TOKEN_RE

TOKEN_BYTES = 32  # secrets.token_urlsafe(32) -> 43 characters, the shortest valid token


class TurnTokenRejected(Exception):
    """Missing, malformed or wrong token. `reason` (missing|malformed|mismatch|unexpected) is for
    logs and the metric only: the agent always gets the same sentence."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def new_token() -> str:
    """A fresh token: 32 random bytes, URL-safe base64 without padding (43 characters)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def is_well_formed(token: object) -> bool:
    return isinstance(token, str) and TURN_TOKEN_RE.fullmatch(token) is not None


def token_hash(token: str) -> str:
    """Lowercase SHA-256 hex of the token's ASCII bytes: what the turn item stores."""
    if not is_well_formed(token):
        raise TurnTokenRejected("malformed")
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def verify(token: str | None, stored_hash: str | None, *, required: bool) -> str:
    """Check a turn action's token against the turn's stored hash; returns the hash to bind.

    - turn not bound yet (`stored_hash` None, first action): a token binds it (its hash is
      returned); no token is refused when `required`, else "" is returned: the turn is bound
      as token-less;
    - turn bound: the token must be present, well formed and hash to the stored value
      (compared with hmac.compare_digest, constant time);
    - turn bound as token-less (`stored_hash` == ""): a later token is refused, so a token-less
      turn cannot be taken over by whoever sends one first; and once the stage requires tokens
      again, its token-less turns are refused like any call without a token.
    Raises TurnTokenRejected.
    """
    if token is None:
        if stored_hash or required:
            raise TurnTokenRejected("missing")
        return "" if stored_hash is None else stored_hash  # "" binds the turn as token-less
    if not is_well_formed(token):
        raise TurnTokenRejected("malformed")
    presented = token_hash(token)
    if stored_hash is None:
        return presented
    if stored_hash == "":
        raise TurnTokenRejected("unexpected")
    if not hmac.compare_digest(presented.encode("ascii"), stored_hash.encode("ascii")):
        raise TurnTokenRejected("mismatch")
    return stored_hash
