"""The turn's one session: the session-lease protocol (docs/sessions.md), built on the TurnStore's
conditional writes.

Exactly one live session per turn, also under concurrent first calls: a caller must win a
conditional "starting" lease before it calls StartCodeInterpreterSession; the others wait for
the winner's "active" write (or take over an expired lease).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from sandbox_common import messages
from sandbox_common.errors import SandboxError

from dispatch.sessions.activation import Activation
from dispatch.turns.store import Turn, TurnStore, TurnStoreUnavailable

_LEASE_POLL_SECONDS = 0.1


@dataclass(frozen=True)
class Started:
    """What a lease winner's `start` got: the session, its session-ledger slot and, for a
    session started before this turn (a warm one), when it really started."""

    session_id: str
    slot_id: str | None = None
    started_at: int | None = None


def acquire_session(
    store: TurnStore,
    turn: Turn,
    *,
    owner: str,
    interpreter_id: str,
    start: Callable[[], str | Started],
    stop_previous: Callable[[str, str], object],
    max_session_age_seconds: int,
    wait_seconds: float,
    activation: Activation | None = None,
) -> tuple[str, bool]:
    """(session_id, started_here). Starts at most one session per turn across all callers. With
    `activation`, the winner's "active" write is sent with it (beside the user code) and joined by
    the caller (`TurnSessions.confirm`), which undoes a failed one; without it, written here."""
    deadline = time.monotonic() + wait_seconds
    while True:
        if usable_session(store, turn, interpreter_id, max_session_age_seconds):
            return str(turn.session_id), False
        lease_seconds = int(wait_seconds) + 5
        if store.take_lease(turn, owner, lease_seconds):
            if turn.live_session:  # replacing a session judged unusable: never leave it running
                stop_previous(str(turn.interpreter_id), str(turn.session_id))
            try:
                got = start()
            except BaseException:
                store.release_lease(turn.tenant_id, turn.turn_id, owner)
                raise
            started = got if isinstance(got, Started) else Started(str(got))
            session_id = started.session_id
            if activation is not None:
                activation.send(
                    partial(
                        store.activate,
                        turn.tenant_id,
                        turn.turn_id,
                        owner,
                        session_id,
                        interpreter_id,
                        slot_id=started.slot_id,
                        started_at=started.started_at,
                    )
                )
                return session_id, True
            try:
                store.activate(
                    turn.tenant_id,
                    turn.turn_id,
                    owner,
                    session_id,
                    interpreter_id,
                    slot_id=started.slot_id,
                    started_at=started.started_at,
                )
            except TurnStoreUnavailable:
                stop_previous(interpreter_id, session_id)  # not the turn's session: never leak it
                raise
            return session_id, True
        if time.monotonic() > deadline:
            raise SandboxError(messages.SESSION_START_WAIT, failure_reason="session_start_wait_timeout")
        store.sleep(_LEASE_POLL_SECONDS)
        refreshed = store.get(turn.tenant_id, turn.turn_id)
        if refreshed is None:
            raise TurnStoreUnavailable("turn vanished")
        turn = refreshed


def usable_session(store: TurnStore, turn: Turn, interpreter_id: str, max_session_age_seconds: int) -> bool:
    """The turn's live session serves this call as it is (a later call): no session to acquire."""
    return (
        turn.live_session
        and turn.interpreter_id == interpreter_id
        and not _too_old(store, turn, max_session_age_seconds)
    )


def _too_old(store: TurnStore, turn: Turn, max_age: int) -> bool:
    # AgentCore reaps a session at sessionTimeoutSeconds; start a fresh one shortly before that.
    return turn.session_started_at is not None and store.clock() - turn.session_started_at > max_age
