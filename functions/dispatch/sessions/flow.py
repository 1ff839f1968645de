"""A turn's one session, taken from the stage's managed sessions (the warm pool, the session caps):
dispatch's side of `SessionSource`.

Per execute_code, in the order of its stages (`dispatch.sessions.stage`):
- `offer_warm(turn, pf)` in begin_turn: notes one pool session on the turn (a hint, not a claim);
- `prepare(call, ...)` BEFORE the call quota, only when the turn has no usable session: claims a
  warm session (the hinted one and the turn binding in one write) or reserves a cold slot in the
  session ledger, or refuses with
  SandboxCapExceeded (tenant_sessions / global_sessions) — nothing counted, nothing started;
- `abandon(call)` afterwards, whatever happened: gives back capacity that no session used (the
  quota refused, another concurrent first call's session won the turn); a no-op once used;
- `acquire(call, ...)` the turn's session through the lease protocol
  (`lease.acquire_session`): only the lease winner runs `SessionSource.start` (warm: no
  Start, no readiness preamble; cold: Start + preamble, a throttled Start retried visibly), and
  the turn item keeps the session's slot id; with `call.activation` a new cold session's two
  activation writes (slot, turn) travel beside the user code and `confirm(call, ...)` joins them
  after it, undoing a failed one (dispatch.sessions.activation);
- `stopped(call, ...)` whenever a turn's session is known to be gone (per-call timeout stopped it,
  AgentCore reaped it, end_turn stopped it): the turn no longer points at it and its slot is
  freed. The reaper frees what a crash left behind.
`call` (a `SessionCall`) carries the call's RetryLog and what it learned about its session; the
idempotency stage puts its `session_source` and the visible retries on the call's row.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sandbox_common import dimensions, messages
from sandbox_common.egress_usage import Counters
from sandbox_common.errors import SandboxCapExceeded, SandboxError
from sandbox_common.observability import logger
from sandbox_common.retries import RetryLog
from sandbox_common.sessions.ledger import LedgerUnavailable, Slot
from sandbox_runtime.preflight import Preflight
from sandbox_runtime.runner import SessionRunner

from dispatch.sessions import lease
from dispatch.sessions.activation import Activation
from dispatch.sessions.source import Acquired, Prepared, SessionSource
from dispatch.turns.store import Turn, TurnStore, TurnStoreUnavailable

# How often a first call refused at a session cap looks again at its turn while another call of
# the turn holds the turn's session capacity (see TurnSessions.prepare).
_CONCURRENT_START_POLL_SECONDS = 0.1


@dataclass
class SessionCall:
    """One call's dealings with its session."""

    retries: RetryLog = field(default_factory=RetryLog)  # the call's visible retries
    prepared: Prepared | None = None  # capacity held and not yet used by a session
    slot_id: str | None = None  # the slot of the session the call runs on, when known
    source: str | None = None  # "warm" | "cold" when this call got a new session for its turn
    # set by a caller that runs the code right after `acquire`: a new cold session's activation
    # writes travel beside the code and are joined by `confirm` (dispatch.sessions.activation)
    activation: Activation | None = None
    # an allowlist session's end reading, sent beside the artifact helper (dispatch.sessions.egress)
    egress_after: Future[Counters] | None = None


class TurnSessions:
    def __init__(
        self,
        *,
        turns: TurnStore,
        source: SessionSource,
        session_timeout_seconds: int,
        call_timeout_seconds: int,
    ) -> None:
        self.turns = turns
        self.source = source
        # AgentCore reaps a session at sessionTimeoutSeconds: a turn moves on shortly before that.
        self.max_session_age_seconds = max(60, session_timeout_seconds - call_timeout_seconds - 30)

    def prepare(self, call: SessionCall, turn: Turn, pf: Preflight) -> None:
        """Hold a session's capacity for a turn without a usable session (raises SandboxCapExceeded).

        Concurrent first calls of ONE turn each try to hold capacity; at a session cap the late
        ones are refused although the turn needs a single session. So a session-cap refusal is
        final only when no other call of the turn holds capacity for it: while one does (its slot
        reserved in the session ledger, not yet started), this call waits on the state — the turn's
        session underway (its lease taken, or bound): go on without a reservation, the lease
        protocol hands it that session (nothing was counted while it waited); the other call's
        capacity given back (its quota refused, its start failed, its reservation lease expired):
        try once more to hold capacity of its own, or refuse."""
        if lease.usable_session(self.turns, turn, str(pf.interpreter_id), self.max_session_age_seconds):
            return
        try:
            call.prepared = self._prepare(call, turn, pf, hinted=True)
        except SandboxCapExceeded as refused:
            at_session_cap = refused.fields.get("dimension") in {d.name for d in dimensions.sessions()}
            if not at_session_cap:
                raise
            coming = self._session_coming(turn)
            if coming is None:
                call.prepared = self._prepare(call, turn, pf)  # the other call gave its capacity back
            elif not coming:
                raise

    def _session_coming(self, turn: Turn) -> bool | None:
        """True: another call of this turn took its session lease (starting) or bound its session.
        False: no call of this turn holds capacity (the refusal stands). None: one held it and
        gave it back without a session."""
        held = False
        while True:
            try:
                fresh = self.turns.get(turn.tenant_id, turn.turn_id)
            except TurnStoreUnavailable:
                return False  # the refusal stands
            if fresh is not None and fresh.session_underway(self.turns.clock()):
                return True
            if fresh is None or fresh.ended:
                return False
            if not self.source.held_for_turn(turn.tenant_id, turn.turn_id):
                return None if held else False
            held = True
            time.sleep(_CONCURRENT_START_POLL_SECONDS)

    def _prepare(self, call: SessionCall, turn: Turn, pf: Preflight, *, hinted: bool = False) -> Prepared:
        """`hinted`: claim the turn's warm hint and bind the turn in the same write (only before the
        lease protocol: inside it, a "starting" lease of our own would fail the bind's condition)."""
        interpreter_id = str(pf.interpreter_id)

        def bind(slot: Slot) -> dict[str, Any]:
            return self.turns.bind_item(
                turn,
                str(slot.session_id),
                interpreter_id,
                slot_id=slot.slot_id,
                started_at=slot.started_at or None,
            )

        # begin_turn found the pool empty moments ago: reserve a cold slot without reading it again
        pool_empty = hinted and turn.pool_known_empty(str(pf.environment), interpreter_id, self.turns.clock())
        return self.source.prepare(
            tenant_id=turn.tenant_id,
            agent_id=turn.agent_id,
            turn_id=turn.turn_id,
            environment=str(pf.environment),
            interpreter_id=interpreter_id,
            retries=call.retries,
            hint=turn.warm_hint if hinted else None,
            bind=bind,
            pool_empty=pool_empty,
        )

    def offer_warm(self, turn: Turn, pf: Preflight) -> bool:
        """begin_turn: pick a warm session of the turn's pool and note it on the turn, so
        the first call claims and binds it with ONE write instead of query + claim + bind. A hint
        only: nothing is claimed, a stale one costs the first call its fallback query. An empty
        pool is noted too: the first call then reserves a cold slot without reading the
        pool again (a stale "empty" costs a cold start). True if a hint was written. Never raises:
        it is an optimisation, begin_turn answers without it."""
        if turn.live_session or turn.ended or not pf.interpreter_id or not pf.environment:
            return False
        try:
            hint = self.source.pick_warm(
                tenant_id=turn.tenant_id,
                environment=str(pf.environment),
                interpreter_id=str(pf.interpreter_id),
            )
            if hint is None:
                self.turns.set_pool_empty(
                    turn, environment=str(pf.environment), interpreter_id=str(pf.interpreter_id)
                )
                return False
            return self.turns.set_hint(turn, hint)
        except (LedgerUnavailable, TurnStoreUnavailable) as exc:
            logger.warning("warm_hint_failed", extra={"turn_id": turn.turn_id, "cause": str(exc)})
            return False

    @contextmanager
    def held(self, call: SessionCall, turn: Turn, pf: Preflight) -> Iterator[None]:
        """`prepare` before the block (a session-cap refusal counts nothing), `abandon` after it
        whatever happened: capacity no session used (quota refused, lost the race)."""
        self.prepare(call, turn, pf)
        try:
            yield
        finally:
            self.abandon(call)

    def abandon(self, call: SessionCall) -> None:
        prepared, call.prepared = call.prepared, None
        if prepared is not None:
            self.source.abandon(prepared)

    def acquire(
        self,
        call: SessionCall,
        turn: Turn,
        *,
        pf: Preflight,
        runner: SessionRunner,
        invocation_id: str,
        wait_seconds: float,
    ) -> tuple[str, bool]:
        """(session_id, started_here): the turn's one session, started (or claimed) by at most one
        caller. Raises what the lease protocol and the session source raise."""
        interpreter_id = str(pf.interpreter_id)
        if call.prepared is not None and call.prepared.bound:
            return self._use_bound(
                call, turn, runner=runner, interpreter_id=interpreter_id, invocation_id=invocation_id
            ), True
        if call.prepared is not None and call.prepared.source == "warm":
            bound = self._bind_warm(
                call, turn, runner=runner, interpreter_id=interpreter_id, invocation_id=invocation_id
            )
            if bound is not None:
                return bound, True
        slots: dict[str, str] = {}  # session_id -> its slot, for every session this call knows
        if turn.session_id and turn.slot_id:
            slots[turn.session_id] = turn.slot_id
        got: list[Acquired] = []

        def start() -> lease.Started:
            # Normally prepared before the quota; prepared here when the turn's session went away
            # between that check and the lease (or for a caller that did not prepare: jobs).
            prepared = call.prepared or self._prepare(call, turn, pf)
            call.prepared = None  # the source owns it now: it releases it if the start fails
            acquired = self.source.start(
                prepared,
                runner=runner,
                interpreter_id=interpreter_id,
                invocation_id=invocation_id,
                retries=call.retries,
                activation=call.activation,
            )
            if call.activation is not None:
                call.activation.session_id, call.activation.slot_id = acquired.session_id, acquired.slot_id
                call.activation.interpreter_id, call.activation.owner = interpreter_id, invocation_id
            got.append(acquired)
            slots[acquired.session_id] = acquired.slot_id
            return lease.Started(acquired.session_id, acquired.slot_id, acquired.started_at)

        def stop(stop_interpreter: str, session_id: str) -> bool:
            # A session replaced as unusable, or ours when its activation failed: stopped, freed.
            stopped = bool(runner.stop_session(stop_interpreter, session_id))
            if stopped:
                self._release(slots.get(session_id) or self._slot_of(turn, session_id))
            return stopped

        session_id, started_here = lease.acquire_session(
            self.turns,
            turn,
            owner=invocation_id,
            interpreter_id=interpreter_id,
            start=start,
            stop_previous=stop,
            max_session_age_seconds=self.max_session_age_seconds,
            wait_seconds=wait_seconds,
            activation=call.activation,
        )
        if started_here and got:
            call.source, call.slot_id = got[-1].source, got[-1].slot_id
        else:
            self.abandon(call)  # another caller's session serves the turn: ours is not needed
            call.slot_id = slots.get(session_id)
        return session_id, started_here

    def confirm(self, call: SessionCall, turn: Turn, runner: SessionRunner) -> None:
        """Join a new session's activation writes sent beside the code (`dispatch.sessions.activation`).
        If one failed, the session is not the turn's: the turn is pointed away from it (or our
        lease released), the session stopped and its slot freed — never leaked — and the call
        fails closed (raises SandboxError). A no-op when nothing was sent."""
        activation, call.activation = call.activation, None
        if activation is None or not activation.pending:
            return
        failure = activation.failure()
        if failure is None:
            return
        session_id, interpreter_id = activation.session_id, activation.interpreter_id
        logger.warning(
            "session_activation_failed",
            extra={"turn_id": turn.turn_id, "session_id": session_id, "cause": repr(failure)},
        )
        if session_id and interpreter_id:
            try:
                if not self.turns.mark_stopped(turn.tenant_id, turn.turn_id, session_id) and activation.owner:
                    self.turns.release_lease(turn.tenant_id, turn.turn_id, activation.owner)
            except TurnStoreUnavailable:
                pass  # the lease expires on its own; a call finding the session gone starts a fresh one
            runner.stop_session(interpreter_id, session_id)
        self._release(activation.slot_id)
        call.slot_id = None
        if isinstance(failure, SandboxError):
            raise failure
        reason = (
            f"turn_store_unavailable:{failure}"
            if isinstance(failure, TurnStoreUnavailable)
            else f"session_activation_failed:{type(failure).__name__}"
        )
        raise SandboxError(messages.INTERNAL, failure_reason=reason)

    def _use_bound(
        self, call: SessionCall, turn: Turn, *, runner: SessionRunner, interpreter_id: str, invocation_id: str
    ) -> str:
        """The warm session already bound to the turn: by the claim's one write (`prepare`), or by
        `_bind_warm`."""
        prepared, call.prepared = call.prepared, None
        assert prepared is not None
        acquired = self.source.start(
            prepared,
            runner=runner,
            interpreter_id=interpreter_id,
            invocation_id=invocation_id,
            retries=call.retries,
        )
        call.source, call.slot_id = acquired.source, acquired.slot_id
        self._stop_replaced(turn, runner)
        return acquired.session_id

    def _stop_replaced(self, turn: Turn, runner: SessionRunner) -> None:
        if turn.live_session:  # it replaced a session judged unusable: never leave that running
            if runner.stop_session(str(turn.interpreter_id), str(turn.session_id)):
                self._release(turn.slot_id)

    def _bind_warm(
        self, call: SessionCall, turn: Turn, *, runner: SessionRunner, interpreter_id: str, invocation_id: str
    ) -> str | None:
        """A claimed warm session needs no start, so no "starting" lease either: it becomes the
        turn's in one conditional write. None when another caller's session (or lease) got there
        first: the lease protocol then decides, and the warm session goes back to its pool."""
        prepared = call.prepared
        assert prepared is not None and prepared.session_id is not None
        try:
            bound = self.turns.bind(
                turn,
                prepared.session_id,
                interpreter_id,
                slot_id=prepared.slot_id,
                started_at=prepared.started_at,
            )
        except BaseException:
            # The write may have applied: the turn may point at this session, so it must never go
            # back to the pool (another turn would share it). Stopped and freed instead; the
            # turn's next call finds it gone and starts a fresh one.
            call.prepared = None
            if runner.stop_session(interpreter_id, prepared.session_id):
                self._release(prepared.slot_id)
            raise
        if not bound:
            return None
        return self._use_bound(
            call, turn, runner=runner, interpreter_id=interpreter_id, invocation_id=invocation_id
        )

    def stopped(self, call: SessionCall | None, tenant_id: str, turn_id: str, session_id: str) -> bool:
        """The turn's session `session_id` is gone: the turn stops pointing at it (False if it had
        moved on already) and its slot is freed."""
        moved = self.turns.mark_stopped(tenant_id, turn_id, session_id)
        slot = call.slot_id if call is not None and call.slot_id else None
        self._release(slot or self._slot_of_stored(tenant_id, turn_id, session_id))
        if call is not None:
            call.slot_id = None
        return moved

    def stop_turn_session(self, turn: Turn, runner: SessionRunner) -> bool:
        """end_turn: stop the turn's live session, point the turn away from it, free its slot.
        False when the stop failed (the turn keeps pointing at it, so a retried end_turn can stop
        it; the interpreter's sessionTimeoutSeconds reaps it otherwise)."""
        if not runner.stop_session(str(turn.interpreter_id), str(turn.session_id)):
            return False
        stopped = self.turns.mark_stopped(turn.tenant_id, turn.turn_id, str(turn.session_id))
        self._release(turn.slot_id)  # a stopped session frees its slot
        return stopped

    def _slot_of(self, turn: Turn, session_id: str) -> str | None:
        return (
            turn.slot_id
            if turn.session_id == session_id and turn.slot_id
            else self._slot_of_stored(turn.tenant_id, turn.turn_id, session_id)
        )

    def _slot_of_stored(self, tenant_id: str, turn_id: str, session_id: str) -> str | None:
        stored = self.turns.get(tenant_id, turn_id)
        return stored.slot_id if stored is not None and stored.session_id == session_id else None

    def _release(self, slot_id: str | None) -> None:
        if slot_id:
            self.source.release(slot_id)  # never raises: a failed release is the reaper's to redo
