"""Visible retries: every retry made on the agent's behalf is reported.

One `RetryLog` per call collects them; the response renders `events` (absent when none) and the
audit row `retries` from the same list, so the two views cannot disagree. Reasons are the
`naming.RETRY_*` names. Stdlib only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from . import naming as n

REASONS: frozenset[str] = frozenset(
    {n.RETRY_SESSION_REAPED, n.RETRY_START_THROTTLED, n.RETRY_QUOTA_CONFLICT, n.RETRY_LEDGER_CONFLICT}
)


def _iso_z(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(frozen=True)
class RetryEvent:
    reason: str
    attempt: int  # 1 = the first retry (the second try)
    at: datetime

    def to_dict(self) -> dict[str, object]:
        return {
            "type": n.EVENT_RETRYING,
            "reason": self.reason,
            "attempt": self.attempt,
            "at": _iso_z(self.at),
        }


@dataclass
class RetryLog:
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    events: list[RetryEvent] = field(default_factory=list)

    def record(self, reason: str, attempt: int) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown retry reason {reason!r}")
        if attempt < 1:
            raise ValueError("attempt counts retries from 1")
        self.events.append(RetryEvent(reason, attempt, self.clock()))

    def record_count(self, reason: str, retries: int) -> None:
        """A part that retried on its own (the quota Lambda, the ledger) reports how many times."""
        for attempt in range(1, max(0, int(retries)) + 1):
            self.record(reason, attempt)

    def extend(self, other: Iterable[RetryEvent]) -> None:
        self.events.extend(other)

    def response_fields(self) -> dict[str, object]:
        """`{"events": [...]}` or `{}`: the response carries `events` only when a retry happened."""
        return {"events": [e.to_dict() for e in self.events]} if self.events else {}

    def audit_fields(self) -> dict[str, object]:
        """`retries` for the audit row: the same entries (an empty list when none)."""
        return {n.AUDIT_ATTR_RETRIES: [e.to_dict() for e in self.events]}
