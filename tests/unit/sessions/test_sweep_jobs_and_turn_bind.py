"""Two pieces of the managed sessions' wiring on moto: the reaper's sweep spares sessions with running
background jobs, and a claimed warm session binds its turn in one conditional
write that only applies to the turn state the caller saw (one session per turn)."""

from __future__ import annotations

from typing import Any

import pytest
from dispatch.turns.store import TurnStore
from reaper.sweep import sweep
from sandbox_common import aws
from sandbox_common import naming as n
from sandbox_common.sessions.ledger import SessionCaps, SessionLedger, Slot

from .conftest import STAGE

NOW = 1_800_000_000


@pytest.fixture
def ledger(tables: dict[str, str]) -> SessionLedger:
    return SessionLedger(
        table_name=n.SESSIONS.physical(STAGE), ddb=aws.client("dynamodb"), clock=lambda: NOW - 1000
    )


@pytest.fixture
def turns(tables: dict[str, str]) -> TurnStore:
    return TurnStore(table_name=n.TURNS.physical(STAGE), ddb=aws.client("dynamodb"), clock=lambda: NOW)


def _active_slot(ledger: SessionLedger, session_id: str, turn_id: str) -> str:
    slot = ledger.reserve(
        tenant_id="acme",
        environment="default-public",
        source="cold",
        caps=SessionCaps(20, 200),
        lease_seconds=60,
        turn_id=turn_id,
        agent_id="a",
    ).slot_id
    assert ledger.activate(slot, session_id=session_id, interpreter_id="i-1")
    return slot


def _run(ledger: SessionLedger, busy: Any) -> tuple[dict[str, Any], list[str]]:
    stopped: list[str] = []

    def stop(slot: Slot) -> bool:
        stopped.append(str(slot.session_id))
        return True

    report = sweep(
        ledger,
        turn_reader=lambda t, turn: None,
        stop=stop,
        now=NOW,
        session_timeout_seconds=3600,
        busy_sessions=busy,
    )
    return report.to_dict(), stopped


def test_sweep_spares_job_busy_session_and_reaps_the_other(ledger: SessionLedger) -> None:
    # Given two sessions no turn owns any more (past the grace), one running a background job
    _active_slot(ledger, "s-job", "t-1")
    _active_slot(ledger, "s-idle", "t-2")
    # When the sweep runs
    report, stopped = _run(ledger, lambda: {"s-job"})
    # Then only the idle one is stopped and freed; the job's session keeps its slot
    assert stopped == ["s-idle"]
    assert report["by_reason"] == {"unowned": 1}
    assert report["spared_for_jobs"] == 1
    assert [s.session_id for s in ledger.slots()] == ["s-job"]


def test_sweep_with_unreadable_jobs_reaps_no_owned_or_ended_session(ledger: SessionLedger) -> None:
    # Given a session no turn owns, and a jobs table that cannot be read
    _active_slot(ledger, "s-1", "t-1")

    def unreadable() -> set[str]:
        raise RuntimeError("jobs table down")

    # When the sweep runs / Then nothing a job might use is stopped
    report, stopped = _run(ledger, unreadable)
    assert stopped == []
    assert report["spared_for_jobs"] == 1
    assert len(ledger.slots()) == 1


def test_turn_bind_applies_only_to_the_state_seen(turns: TurnStore) -> None:
    # Given a fresh turn, seen without a session by two callers
    seen = turns.create("acme", "a", "t-1")
    assert seen is not None
    # When the first binds its warm session
    assert turns.bind(seen, "s-warm-1", "i-1", slot_id="slot-1", started_at=NOW - 300) is True
    # Then the second's bind (on the same stale view) does not apply
    assert turns.bind(seen, "s-warm-2", "i-1", slot_id="slot-2", started_at=NOW - 100) is False
    # And the turn holds the first session, its slot and its real start time
    turn = turns.get("acme", "t-1")
    assert turn is not None
    assert (turn.session_id, turn.slot_id, turn.session_started_at, turn.live_session) == (
        "s-warm-1",
        "slot-1",
        NOW - 300,
        True,
    )


def test_turn_bind_refused_on_an_ended_turn_and_during_another_callers_lease(turns: TurnStore) -> None:
    # Given a turn whose session another caller is starting right now (an unexpired lease)
    seen = turns.create("acme", "a", "t-2")
    assert seen is not None
    assert turns.take_lease(seen, "other-caller", 60)
    starting = turns.get("acme", "t-2")
    assert starting is not None
    # When a warm session would bind it / Then it does not (the lease protocol decides)
    assert turns.bind(starting, "s-warm", "i-1", slot_id="slot-1", started_at=None) is False
    # And an ended turn is never bound
    ended = turns.create("acme", "a", "t-3")
    assert ended is not None
    turns.end("acme", "t-3")
    assert turns.bind(ended, "s-warm", "i-1", slot_id="slot-1", started_at=None) is False
    gone = turns.get("acme", "t-3")
    assert gone is not None and gone.session_id is None
