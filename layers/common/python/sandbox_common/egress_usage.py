"""What left the sandbox during one call: the `egress` attribute of every audit row.

    {"mode": "public"|"none"|"allowlist", "allowed": N, "denied": N,
     "denied_hosts": [first 10, redacted], "bytes_out": N, "bytes_in": N}

`mode` is the egress of the call's environment (naming.EGRESS_MODE). Only an `allowlist` session
has the egress proxy in its path, so only its figures can be other than zeros and []: they are
the difference of the session's `counters` item (naming.EGRESS, written by the proxy) between the
call's start and its end. The proxy counts per session, so what a background job of the same
session sends meanwhile is in the figures too; the row says what the session sent while the call
ran.

The counters item, as the proxy writes it (functions/egress_proxy): numbers `allowed`, `denied`,
`bytes_out`, `bytes_in`; `denied_hosts`, the latest denials (a map by sequence number), each
`{"host", "seq"}` where `seq` is the value `denied` took with that denial; and `cap_refused`,
`{"dimension", "count", "at"}`, the cap dimension that last refused the session a connection and
how many times one did. The proxy writes a denial before it answers it, and adds allowed requests
and bytes about once a second: bytes of a call's last moments can show in the next call's row.

Pure (no I/O); dispatch, the jobs' end and the interrupted-call sweep render rows with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import naming as n
from .redaction.catalogue import redact

MAX_DENIED_HOSTS = 10
MAX_HOST_CHARS = 253
NONE_MODE = "none"
FIELDS = (n.EGRESS_ATTR_ALLOWED, n.EGRESS_ATTR_DENIED, n.EGRESS_ATTR_BYTES_OUT, n.EGRESS_ATTR_BYTES_IN)


def mode_of(environment: str | None) -> str:
    """The egress of an environment; `none` when no environment was reached (nothing could leave)."""
    return n.EGRESS_MODE.get(environment or "", NONE_MODE)


def empty(mode: str) -> dict[str, Any]:
    """A row's `egress` when no proxy was in its path (or nothing went through it)."""
    return {"mode": mode, "allowed": 0, "denied": 0, "denied_hosts": [], "bytes_out": 0, "bytes_in": 0}


def is_allowlist(environment: str | None) -> bool:
    return mode_of(environment) == "allowlist"


@dataclass(frozen=True)
class Counters:
    """One reading of a session's counters item (all zero before the proxy wrote any)."""

    allowed: int = 0
    denied: int = 0
    bytes_out: int = 0
    bytes_in: int = 0
    denied_hosts: tuple[tuple[int, str], ...] = field(default_factory=tuple)  # (seq, host), by seq
    cap_refused: tuple[str, int] | None = None  # (dimension, count)

    @classmethod
    def from_item(cls, item: Mapping[str, Any] | None) -> Counters:
        """From the item as plain values (deserialized). Anything unreadable counts as zero: the
        figures are a record, and a half-written item must not fail a call."""
        if not item:
            return ZERO
        numbers = {f: _count(item.get(f)) for f in FIELDS}
        hosts: list[tuple[int, str]] = []
        raw_hosts = item.get(n.EGRESS_ATTR_DENIED_HOSTS) or ()
        # a map keyed by sequence number (the proxy trims it by key); a list reads the same
        for entry in raw_hosts.values() if isinstance(raw_hosts, Mapping) else raw_hosts:
            if isinstance(entry, Mapping) and isinstance(entry.get("host"), str):
                hosts.append((_count(entry.get("seq")), entry["host"]))
        refused = item.get(n.EGRESS_ATTR_CAP_REFUSED)
        cap: tuple[str, int] | None = None
        if isinstance(refused, Mapping) and isinstance(refused.get("dimension"), str):
            cap = (refused["dimension"], _count(refused.get("count")))
        return cls(**numbers, denied_hosts=tuple(sorted(hosts)), cap_refused=cap)

    def cap_refused_since(self, before: Counters) -> str | None:
        """The cap dimension that refused a connection between `before` and this reading."""
        if self.cap_refused is None:
            return None
        dimension, count = self.cap_refused
        earlier = before.cap_refused[1] if before.cap_refused is not None else 0
        return dimension if count > earlier else None

    def since(self, before: Counters, mode: str = "allowlist") -> dict[str, Any]:
        """The row's `egress` for what happened between `before` and this reading."""
        usage = empty(mode)
        for name in FIELDS:
            usage[name] = max(0, getattr(self, name) - getattr(before, name))
        hosts = [host for seq, host in self.denied_hosts if seq > before.denied]
        usage["denied_hosts"] = [redact(h)[:MAX_HOST_CHARS] for h in hosts[:MAX_DENIED_HOSTS]]
        return usage


ZERO = Counters()


@dataclass(frozen=True)
class Baseline:
    """The reading a call starts from: its session's counters before its code ran. A call whose
    session was started for it (or claimed warm) starts from ZERO: nothing went through the proxy
    before its first call but the readiness call's /bind, which the proxy answers itself."""

    session_id: str
    counters: Counters

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON, for a call that pauses (a tool call) or a background job: kept with it."""
        c = self.counters
        out: dict[str, Any] = {"session_id": self.session_id, **{f: getattr(c, f) for f in FIELDS}}
        if c.cap_refused is not None:
            out["cap_refused"] = {"dimension": c.cap_refused[0], "count": c.cap_refused[1]}
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Baseline | None:
        if not isinstance(data, Mapping) or not isinstance(data.get("session_id"), str):
            return None
        return cls(data["session_id"], Counters.from_item(data))


def usage(
    environment: str | None, session_id: str | None, baseline: Baseline | None, after: Counters
) -> dict[str, Any]:
    """A row's `egress`: `after` since the baseline read for this very session (else since zero)."""
    before = baseline.counters if baseline is not None and baseline.session_id == session_id else ZERO
    return after.since(before, mode_of(environment))


def cap_refused(session_id: str | None, baseline: Baseline | None, after: Counters) -> str | None:
    """The cap dimension that refused this session a connection during the call, if one did."""
    before = baseline.counters if baseline is not None and baseline.session_id == session_id else ZERO
    return after.cap_refused_since(before)


def _count(value: Any) -> int:
    """A non-negative integer from a number (DynamoDB numbers deserialize as Decimal)."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return 0
    return max(0, number)
