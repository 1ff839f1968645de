"""One session of the local interpreter: its identity and lifetime, what it holds on the host
(process, pipes, uid, cgroups, network helpers, relays), and the two errors a caller is answered
about sessions."""

from __future__ import annotations

import secrets
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from infra.local.interpreter import cgroups, egress, network, s3relay
from infra.local.interpreter.uids import UidLease

READY, TERMINATED = "READY", "TERMINATED"
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


class NotFound(Exception):
    """Unknown interpreter, or a session that does not exist (for this interpreter) or is over."""


class QuotaExceeded(Exception):
    pass


def new_session_id() -> str:
    """A ULID (26 Crockford base-32 chars), the shape AgentCore session ids have."""
    value = (int(time.time() * 1000) << 80) | secrets.randbits(80)
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Session:
    session_id: str
    interpreter_id: str
    network_mode: str
    name: str | None
    timeout_seconds: int
    created_at: datetime
    expires_at: float  # time.monotonic()
    root: str
    status: str = READY
    last_updated_at: datetime = field(default_factory=utc_now)
    proc: subprocess.Popen[bytes] | None = None
    req_fd: int = -1
    resp_fd: int = -1
    termination: str | None = None  # stopped | expired | died | shutdown
    uid: int | None = None  # the session's own host uid (bwrap)
    uid_lease: UidLease | None = None
    cgroup: cgroups.SessionCgroup | None = None
    slirp: network.Slirp | None = None
    relay: s3relay.S3Relay | None = None  # the tenant's data, scoped like its role
    egress_relay: egress.EgressRelay | None = None  # VPC: its one way out, to the egress proxy
    exec_lock: threading.Lock = field(default_factory=threading.Lock)
    seq: int = 0  # the last request's sequence number: its answer must carry it back

    def describe(self) -> dict[str, Any]:
        return {
            "codeInterpreterIdentifier": self.interpreter_id,
            "sessionId": self.session_id,
            "name": self.name,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.last_updated_at,
            "sessionTimeoutSeconds": self.timeout_seconds,
            "status": self.status,
        }
