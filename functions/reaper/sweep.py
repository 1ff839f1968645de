"""What the reaper stops, decided from the ledger and the turns table.

A slot is reaped (session stopped, then its capacity released) when
- `turn_ended`:   the turn that holds it has ended (end_turn came, but the stop did not happen);
- `lease_expired`: a start never finished (state `starting` past its lease), or the session is
                  past the interpreter's session timeout (AgentCore reaped it; only the slot is left);
- `unowned`:      no turn owns it — the slot names no turn, the turn is gone, or the turn moved
                  on to another session — and it is older than the grace a start needs;
- `recycled`:     a warm session nobody claimed, at its recycle time (before the session timeout).
A live session of a live turn is never touched. A stop that fails keeps the slot (capacity stays
held by a session that may still run); the next sweep retries it.

A session that still runs a background job (it outlives end_turn until its last job ends) is
spared from `turn_ended` / `unowned`: `busy_sessions()` (JobStore.busy_sessions) names them, read
once per sweep. If it cannot be read, every such slot is spared this run (a job is never killed on
a guess; the capacity waits one more period). The job sweep stops the session when its last job
ends; `lease_expired` (past the session timeout: AgentCore already ended it) is never spared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox_common import naming as n
from sandbox_common.observability import emit_metric, logger
from sandbox_common.sessions.ledger import SessionLedger, Slot

# Reasons a running background job overrides (its session must outlive the turn).
SPARED_FOR_JOBS = ("turn_ended", "unowned")
# A slot may briefly disagree with its turn while a first call is between "slot active" and
# "turn active": never judge a slot younger than this as unowned.
UNOWNED_GRACE_SECONDS = 300


@dataclass(frozen=True)
class TurnView:
    ended: bool
    session_id: str | None


def read_turn(ddb: Any, turns_table: str, tenant_id: str, turn_id: str) -> TurnView | None:
    """Turns are keyed by (tenant, turn) (naming.TURNS)."""
    key = n.TURNS.key(tenant_id, turn_id)
    out = ddb.get_item(TableName=turns_table, Key=key, ConsistentRead=True)
    item = out.get("Item")
    if item is None:
        return None
    state = item.get(n.TURN_ATTR_SESSION_STATE, {}).get("S")
    session = item.get(n.TURN_ATTR_SESSION_ID, {}).get("S") if state == n.TURN_SESSION_ACTIVE else None
    return TurnView(ended=item.get(n.TURN_ATTR_ENDED, {}).get("BOOL", False), session_id=session)


def verdict(slot: Slot, turn: TurnView | None, *, now: float, session_timeout_seconds: int) -> str | None:
    """Why this slot must be reaped, or None to leave it alone."""
    if slot.state == "starting":
        return "lease_expired" if (slot.lease_expires_at or 0) < now else None
    if slot.state == "warm":
        return "recycled" if slot.recycle_at is not None and slot.recycle_at <= now else None
    if now - slot.started_at > session_timeout_seconds:
        return "lease_expired"
    if turn is not None and turn.ended:
        return "turn_ended"
    young = now - max(slot.started_at, slot.claimed_at or 0) < UNOWNED_GRACE_SECONDS
    if not young and (slot.turn_id is None or turn is None or turn.session_id != slot.session_id):
        return "unowned"
    return None


@dataclass
class SweepReport:
    examined: int = 0
    reaped: int = 0
    stop_failed: int = 0
    by_reason: dict[str, int] | None = None
    spared_for_jobs: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "examined": self.examined,
            "reaped": self.reaped,
            "stop_failed": self.stop_failed,
            "by_reason": dict(self.by_reason or {}),
            "spared_for_jobs": self.spared_for_jobs,
        }


def sweep(
    ledger: SessionLedger,
    *,
    turn_reader: Callable[[str, str], TurnView | None],  # (tenant_id, turn_id)
    stop: Callable[[Slot], bool],
    now: float,
    session_timeout_seconds: int,
    busy_sessions: Callable[[], set[str]] | None = None,
) -> SweepReport:
    """`stop(slot)` stops the slot's session with its tenant's runner (True = no longer running);
    `busy_sessions()` the session ids with a background job not yet final (None: no jobs)."""
    report = SweepReport(by_reason={})
    busy: set[str] | None = set()
    busy_read = busy_sessions is None
    for slot in ledger.slots():
        report.examined += 1
        turn = turn_reader(slot.tenant_id, slot.turn_id) if slot.turn_id and slot.state == "active" else None
        reason = verdict(slot, turn, now=now, session_timeout_seconds=session_timeout_seconds)
        if reason is None:
            continue
        if reason in SPARED_FOR_JOBS and slot.session_id:
            if not busy_read:  # read once, and only when some slot is due
                busy, busy_read = _read_busy(busy_sessions), True
            if busy is None or slot.session_id in busy:
                report.spared_for_jobs += 1
                continue
        if slot.session_id and not stop(slot):
            report.stop_failed += 1
            continue
        if ledger.release(slot.slot_id):
            report.reaped += 1
            assert report.by_reason is not None
            report.by_reason[reason] = report.by_reason.get(reason, 0) + 1
            # One pure-JSON line per session stopped; the metric (alarmed) counts leaks only:
            # recycling an unclaimed warm session is the pool's routine, not a leak.
            logger.warning(
                n.REAPER_EVENT_SESSION_REAPED,
                extra={
                    "event": n.REAPER_EVENT_SESSION_REAPED,
                    "reason": reason,
                    "slot_id": slot.slot_id,
                    "session_id": slot.session_id,
                    "tenant_id": slot.tenant_id,
                    "turn_id": slot.turn_id,
                    "state": slot.state,
                    "source": slot.source,
                },
            )
            if reason != "recycled":
                emit_metric(
                    n.METRIC_SESSIONS_REAPED, properties={"reason": reason, "tenant_id": slot.tenant_id}
                )
    return report


def _read_busy(busy_sessions: Callable[[], set[str]] | None) -> set[str] | None:
    """The busy session ids, or None when they cannot be read (then nothing is judged idle)."""
    if busy_sessions is None:
        return set()
    try:
        return set(busy_sessions())
    except Exception as exc:  # noqa: BLE001 — the jobs table is down: spare, never kill a job on a guess
        logger.warning("busy_sessions_unavailable", extra={"failure_reason": type(exc).__name__})
        return None
