"""A session's proxy credential (pure): `Proxy-Authorization: Basic base64(session_id:secret)`.

The session runner issues it (a random secret, stored as its SHA-256 with the tenant, environment
and expiry in the EGRESS table's `credential` item) and revokes it when the session stops; the
session's readiness call binds it to the address the session reaches the proxy from. Here: parse
the header, and decide whether a stored credential admits this secret from this address.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from sandbox_common import naming as n

from . import checks

SESSION_ID_RE = n.REQUEST_ID_RE  # a session id as AgentCore and the local interpreter spell it
MAX_SECRET_CHARS = 256


@dataclass(frozen=True)
class Presented:
    """What the client sent: the session id and the secret (never logged, never stored)."""

    session_id: str
    secret: str


@dataclass(frozen=True)
class Credential:
    """A stored credential item, as the proxy reads it."""

    session_id: str
    tenant_id: str
    environment: str
    secret_sha256: str
    expires_at: int
    revoked: bool = False
    source: str | None = None

    @classmethod
    def from_item(cls, session_id: str, item: dict[str, Any]) -> Credential | None:
        """From a deserialized item; None when it lacks what a credential needs (never admits)."""
        try:
            tenant = str(item[n.EGRESS_ATTR_TENANT])
            environment = str(item[n.EGRESS_ATTR_ENVIRONMENT])
            digest = str(item[n.EGRESS_ATTR_SECRET_SHA256])
            expires_at = int(item[n.TTL_ATTRIBUTE])
        except (KeyError, TypeError, ValueError):
            return None
        if not n.TENANT_ID_RE.match(tenant) or environment not in n.ENVIRONMENTS:
            return None
        source = item.get(n.EGRESS_ATTR_SOURCE)
        return cls(
            session_id=session_id,
            tenant_id=tenant,
            environment=environment,
            secret_sha256=digest,
            expires_at=expires_at,
            revoked=n.EGRESS_ATTR_REVOKED_AT in item,
            source=str(source) if source else None,
        )


def secret_sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def parse_proxy_authorization(value: str | None) -> Presented | None:
    """The credential in a Proxy-Authorization header, or None when there is none or it is not
    `Basic base64(session_id:secret)` with a plausible session id and secret."""
    if not value:
        return None
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "basic" or not token or len(token) > 1024:
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    session_id, sep, secret = decoded.partition(":")
    if not sep or not SESSION_ID_RE.match(session_id) or not 0 < len(secret) <= MAX_SECRET_CHARS:
        return None
    return Presented(session_id, secret)


def verify(
    credential: Credential | None, presented: Presented, *, peer: str, now: float, binding: bool = False
) -> str | None:
    """None when the stored credential admits the presented secret from `peer` at `now`, else the
    refusal's reason. `binding`: the request binds the credential (an unbound one is admitted, and
    a bound one only from its own address)."""
    if credential is None or credential.session_id != presented.session_id:
        return checks.CREDENTIAL_INVALID
    if not hmac.compare_digest(credential.secret_sha256, secret_sha256(presented.secret)):
        return checks.CREDENTIAL_INVALID
    if credential.revoked:
        return checks.CREDENTIAL_REVOKED
    if credential.expires_at <= now:
        return checks.CREDENTIAL_EXPIRED
    if credential.source is None:
        return None if binding else checks.CREDENTIAL_UNBOUND
    if credential.source != peer:
        return checks.BIND_CONFLICT if binding else checks.WRONG_SOURCE
    return None
