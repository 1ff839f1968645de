"""Where the first call of a turn gets its session: the warm pool, the session caps, visible
retries (docs/sessions.md).

Two steps, so that a session-cap refusal counts nothing:
- `prepare(...)` BEFORE the call quota, for a turn without a live session: claims a warm session
  or reserves a cold slot, or raises SandboxCapExceeded; `abandon(prepared)` undoes it when the
  quota then refuses (or another concurrent first call's session won the turn);
- `start(prepared, ...)` as the `start` step of the turn's session lease
  (`lease.acquire_session(start=...)`, which runs it only for the lease winner, so a turn
  gets at most one session), or for a warm session right after `sessions.flow` bound it to the
  turn in one conditional write: returns `Acquired(session_id, source, slot_id, started_at)`.

1. warm: claim one warm session of the tenant × environment pool — no Start, no readiness
   preamble (the refill already ran it; a session whose preamble failed was never offered). With
   the turn's warm hint (noted by begin_turn, `pick_warm`) the claim and the turn binding are ONE
   TransactWriteItems (`Prepared.bound`); without one, or when it is stale, a pool query and one
   conditional write per candidate (sessions.flow then binds the turn) — no query when begin_turn
   found the pool empty moments ago (`pool_empty`): straight to the cold reservation;
2. cold: reserve capacity in the ledger (tenant_sessions / global_sessions, exact under
   concurrency, 0 = kill switch, fail closed), then Start + readiness preamble through the runner.
   A throttled Start is retried (bounded, jittered) and reported as a visible retry; AgentCore's
   ServiceQuotaExceededException answers `global_sessions`. Any failure releases the reservation.

Refusals are `SandboxCapExceeded` with dimension tenant_sessions / global_sessions (or unknown when
the caps or the ledger cannot be read), resets_at = now + 30 s (60 s when failing closed).
A ServiceQuotaExceededException on Start happens after the quota check (the call unit is spent,
as a call spends it on any later failure, docs/failure-behaviour.md); it still answers `global_sessions`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sandbox_common import dimensions, messages
from sandbox_common import naming as n
from sandbox_common.errors import SandboxCapExceeded, SandboxError
from sandbox_common.observability import emit_metric, logger
from sandbox_common.retries import RetryLog
from sandbox_common.sessions.caps import SessionCapsUnavailable
from sandbox_common.sessions.ledger import LedgerUnavailable, SessionCapReached, SessionLedger, Slot
from sandbox_common.windows import FAIL_CLOSED_RETRY_SECONDS, iso_z, utc_now
from sandbox_runtime.runner import SessionRunner

from dispatch.sessions.activation import Activation

START_ATTEMPTS = 3  # a throttled Start is tried this many times in all
_THROTTLED = "start_failed:ThrottlingException"
_QUOTA = "start_failed:ServiceQuotaExceededException"


@dataclass(frozen=True)
class Acquired:
    session_id: str
    source: str  # warm | cold
    slot_id: str
    started_at: int | None = None  # epoch s; a warm session started before the turn claimed it


@dataclass(frozen=True)
class Prepared:
    """Capacity held for a first call, before anything is counted: a claimed warm session, or a
    reserved cold slot still to be started."""

    source: str  # warm | cold
    slot_id: str
    tenant_id: str
    turn_id: str
    session_id: str | None = None  # warm only
    interpreter_id: str | None = None
    started_at: int | None = None  # warm only: when the refill reserved and started it (epoch s)
    bound: bool = False  # warm only: the claim already bound the turn to it (claim_warm_bound)


class SessionSource:
    def __init__(
        self,
        *,
        ledger: SessionLedger,
        caps_for: Callable[[str], Any],
        claim_min_life_seconds: int,
        lease_seconds: int,
        clock: Callable[[], datetime] = utc_now,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.ledger = ledger
        self.caps_for = caps_for
        self.claim_min_life_seconds = claim_min_life_seconds
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.sleep = sleep

    # --- step 1, before the call quota: hold capacity or refuse with nothing counted -------------
    def prepare(
        self,
        *,
        tenant_id: str,
        agent_id: str,
        turn_id: str,
        environment: str,
        interpreter_id: str,
        retries: RetryLog,
        hint: dict[str, str] | None = None,
        bind: Callable[[Slot], dict[str, Any]] | None = None,
        pool_empty: bool = False,
    ) -> Prepared:
        """`hint` + `bind`: the turn's warm hint (begin_turn) and its bind item builder — then the
        claim and the turn binding are ONE write; a stale hint falls back to querying the pool.
        `pool_empty`: begin_turn just found the pool empty — reserve a cold slot without reading it."""
        if hint is not None and bind is not None:
            bound = self._claim_hinted(
                hint,
                tenant_id=tenant_id,
                agent_id=agent_id,
                turn_id=turn_id,
                environment=environment,
                interpreter_id=interpreter_id,
                bind=bind,
            )
            if bound is not None:
                return bound
        warm = None
        try:
            if not pool_empty:
                warm = self.ledger.claim_warm(
                    tenant_id=tenant_id,
                    environment=environment,
                    turn_id=turn_id,
                    agent_id=agent_id,
                    min_life_seconds=self.claim_min_life_seconds,
                    interpreter_id=interpreter_id,
                )
        except LedgerUnavailable as exc:
            raise self._fail_closed(tenant_id, f"session_ledger_unavailable:{exc.code}") from None
        if warm is not None and warm.session_id:
            return Prepared(
                "warm",
                warm.slot_id,
                tenant_id,
                turn_id,
                warm.session_id,
                warm.interpreter_id,
                started_at=warm.started_at or None,
            )
        try:
            caps = self.caps_for(tenant_id)
            reservation = self.ledger.reserve(
                tenant_id=tenant_id,
                environment=environment,
                source="cold",
                caps=caps,
                lease_seconds=self.lease_seconds,
                turn_id=turn_id,
                agent_id=agent_id,
            )
        except SessionCapReached as exc:
            raise self._refuse(tenant_id, exc.dimension, kill_switch=exc.kill_switch) from None
        except SessionCapsUnavailable as exc:
            raise self._fail_closed(tenant_id, f"session_caps_unavailable:{exc.reason}") from None
        except LedgerUnavailable as exc:
            raise self._fail_closed(tenant_id, f"session_ledger_unavailable:{exc.code}") from None
        retries.record_count(n.RETRY_LEDGER_CONFLICT, reservation.retries)
        return Prepared("cold", reservation.slot_id, tenant_id, turn_id, interpreter_id=interpreter_id)

    def _claim_hinted(
        self,
        hint: dict[str, str],
        *,
        tenant_id: str,
        agent_id: str,
        turn_id: str,
        environment: str,
        interpreter_id: str,
        bind: Callable[[Slot], dict[str, Any]],
    ) -> Prepared | None:
        if hint["environment"] != environment or hint["interpreter_id"] != interpreter_id:
            return None  # the tenant's environment/interpreter changed since begin_turn: not this pool's
        slot = Slot(
            slot_id=hint["slot_id"],
            tenant_id=tenant_id,
            environment=environment,
            state="warm",
            source="warm",
            started_at=int(hint["started_at"] or 0),
            session_id=hint["session_id"],
            interpreter_id=hint["interpreter_id"],
        )
        try:
            claimed = self.ledger.claim_warm_bound(
                slot,
                turn_id=turn_id,
                agent_id=agent_id,
                min_life_seconds=self.claim_min_life_seconds,
                bind=bind(slot),
            )
        except LedgerUnavailable as exc:
            # Both writes or neither (one transaction): if it applied after all, the turn points
            # at the session and its next call uses it; refused now, nothing counted.
            raise self._fail_closed(tenant_id, f"session_ledger_unavailable:{exc.code}") from None
        if not claimed:
            return None
        return Prepared(
            "warm",
            slot.slot_id,
            tenant_id,
            turn_id,
            slot.session_id,
            slot.interpreter_id,
            started_at=slot.started_at or None,
            bound=True,
        )

    def held_for_turn(self, tenant_id: str, turn_id: str) -> bool:
        """Another call of this turn holds session capacity for it (a reserved slot not yet started).
        False when the ledger cannot be read: a refusal then stands."""
        try:
            return self.ledger.holds_for_turn(tenant_id, turn_id)
        except LedgerUnavailable:
            return False

    def pick_warm(self, *, tenant_id: str, environment: str, interpreter_id: str) -> dict[str, str] | None:
        """A warm session for a turn's hint (begin_turn): one of the pool's claimable sessions at
        random (turns begun together rarely pick the same one), or None. Raises LedgerUnavailable."""
        found = self.ledger.warm_candidates(
            tenant_id=tenant_id,
            environment=environment,
            min_life_seconds=self.claim_min_life_seconds,
            interpreter_id=interpreter_id,
        )
        if not found:
            return None
        slot = random.choice(found)  # noqa: S311 — spreading picks, not a secret
        return {
            "slot_id": slot.slot_id,
            "session_id": str(slot.session_id),
            "interpreter_id": interpreter_id,
            "environment": environment,
            "started_at": str(slot.started_at or ""),
        }

    def abandon(self, prepared: Prepared) -> None:
        """The call was refused after prepare (quota) or another caller's session won the turn:
        a warm session goes back to its pool, a cold reservation is released. A warm session the
        claim already bound to the turn stays the turn's: a concurrent call of the same turn may
        already run code in it, so it must never go back to a pool another turn claims from."""
        if prepared.bound:
            return
        if prepared.source == "warm":
            try:
                if self.ledger.unclaim(prepared.slot_id, turn_id=prepared.turn_id):
                    return
            except LedgerUnavailable:
                pass  # still claimed by a turn that never used it: the reaper frees it as unowned
            return
        self._release(prepared.slot_id)

    # --- step 2, inside the turn's session lease: the session itself ------------------------------
    def start(
        self,
        prepared: Prepared,
        *,
        runner: SessionRunner,
        interpreter_id: str,
        invocation_id: str,
        retries: RetryLog,
        activation: Activation | None = None,
    ) -> Acquired:
        """Warm: nothing to do (no Start, no preamble). Cold: Start + preamble, throttling retried,
        then the slot's activation — sent with `activation` (beside the user code, joined by the
        caller: `dispatch.sessions.activation`), else written here before returning."""
        if prepared.source == "warm":
            emit_metric(n.METRIC_WARM_CLAIMED, dimensions={"source": "warm"})
            return Acquired(str(prepared.session_id), "warm", prepared.slot_id, prepared.started_at)
        try:
            session_id = self._start(runner, interpreter_id, invocation_id, retries)
        except BaseException as exc:
            self._release(prepared.slot_id)
            if str(getattr(exc, "failure_reason", "")).startswith(_QUOTA):
                # AgentCore's own account quota: the stage has no session to give
                raise self._refuse(prepared.tenant_id, dimensions.GLOBAL_SESSIONS.name) from None
            raise
        if activation is not None:
            activation.send(lambda: self._activate(prepared, session_id, interpreter_id))
        elif not self.ledger.activate(prepared.slot_id, session_id=session_id, interpreter_id=interpreter_id):
            # the reaper released our slot while Start ran (lease expired): never run unaccounted
            runner.stop_session(interpreter_id, session_id)
            raise SandboxError(messages.INTERNAL, failure_reason="session_slot_lost")
        emit_metric(n.METRIC_WARM_CLAIMED, dimensions={"source": "cold"})
        return Acquired(session_id, "cold", prepared.slot_id)

    def _activate(self, prepared: Prepared, session_id: str, interpreter_id: str) -> None:
        """The slot now holds the started session; raises SandboxError when it did not apply (the
        reaper released the slot: its lease expired) or the ledger gave no answer."""
        try:
            activated = self.ledger.activate(
                prepared.slot_id, session_id=session_id, interpreter_id=interpreter_id
            )
        except LedgerUnavailable as exc:
            raise SandboxError(
                messages.INTERNAL, failure_reason=f"session_ledger_unavailable:{exc.code}"
            ) from None
        if not activated:
            raise SandboxError(messages.INTERNAL, failure_reason="session_slot_lost")

    def _start(
        self, runner: SessionRunner, interpreter_id: str, invocation_id: str, retries: RetryLog
    ) -> str:
        for attempt in range(START_ATTEMPTS):
            # One name + client token per attempt: a lost answer can be found by name and stopped.
            token = f"{invocation_id}-{attempt}"
            try:
                return str(runner.start_session(interpreter_id, name=f"sbx-{token}", client_token=token))
            except SandboxError as exc:
                if (
                    not str(exc.fields.get("failure_reason", "")).startswith(_THROTTLED)
                    or attempt + 1 >= START_ATTEMPTS
                ):
                    raise
                retries.record(n.RETRY_START_THROTTLED, attempt + 1)
                self.sleep(random.uniform(0.1, 0.4) * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def release(self, slot_id: str) -> None:
        """The turn's session was stopped (end_turn, timeout, readiness failure): free its slot."""
        self._release(slot_id)

    def _release(self, slot_id: str) -> None:
        try:
            self.ledger.release(slot_id)
        except LedgerUnavailable as exc:  # the reaper frees it on its next run
            logger.warning("session_slot_release_failed", extra={"slot_id": slot_id, "cause": exc.code})

    def _refuse(self, tenant_id: str, dimension: str, *, kill_switch: bool = False) -> SandboxCapExceeded:
        resets_at = iso_z(dimensions.session_retry_at(self.clock()))
        logger.warning(
            "sandbox cap exceeded",
            extra={
                "event": "sandbox_cap_exceeded",
                "tenant_id": tenant_id,
                "dimension": dimension,
                "resets_at": resets_at,
                n.FIELD_KILL_SWITCH: kill_switch,
            },
        )
        emit_metric(n.METRIC_CAP_EXCEEDED, dimensions={"dimension": dimension})
        emit_metric(n.METRIC_CAP_EXCEEDED, dimensions={"tenant_id": tenant_id})
        return SandboxCapExceeded(
            messages.cap_exceeded(dimension, resets_at),
            dimension=dimension,
            resets_at=resets_at,
            failure_reason=f"cap_exceeded:{dimension}",
        )

    def _fail_closed(self, tenant_id: str, reason: str) -> SandboxCapExceeded:
        resets_at = iso_z(self.clock() + timedelta(seconds=FAIL_CLOSED_RETRY_SECONDS))
        logger.error(
            "sandbox cap exceeded",
            extra={
                "event": "sandbox_cap_exceeded",
                "tenant_id": tenant_id,
                "dimension": dimensions.UNKNOWN,
                "fail_closed_reason": reason,
            },
        )
        emit_metric(n.METRIC_QUOTA_FAIL_CLOSED)
        emit_metric(n.METRIC_CAP_EXCEEDED, dimensions={"dimension": dimensions.UNKNOWN})
        emit_metric(n.METRIC_CAP_EXCEEDED, dimensions={"tenant_id": tenant_id})
        return SandboxCapExceeded(
            messages.cap_exceeded(dimensions.UNKNOWN, resets_at),
            dimension=dimensions.UNKNOWN,
            resets_at=resets_at,
            failure_reason=reason,
        )
