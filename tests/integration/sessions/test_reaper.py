"""The reaper and warm-pool refill with real parts: sessions in the local
interpreter, the ledger and turns in moto, the tenant's runner role through moto's STS."""

from __future__ import annotations

import time

import pytest
from dispatch.sessions import lease
from dispatch.turns import flow as turn_logic
from sandbox_common import aws, dimensions
from sandbox_common import naming as n
from sandbox_common.sessions.ledger import SessionCaps, SessionLedger

from tests.support.emf import emf_records

from .conftest import Stack, interpreter_id, set_warm, slots_of

CAPS = SessionCaps(20, 200)


def _ledger(stack: Stack) -> SessionLedger:
    return SessionLedger(table_name=stack.resources.tables[n.SESSIONS.logical], ddb=aws.client("dynamodb"))


def _turns(stack: Stack):  # the dispatch package's own turn store, on the real table
    from dispatch.turns.store import TurnStore

    return TurnStore(table_name=stack.resources.tables[n.TURNS.logical], ddb=aws.client("dynamodb"))


def _live_turn_session(stack: Stack, turn_id: str) -> tuple[str, str]:
    """A cold session serving `turn_id`, recorded as dispatch records it: slot + turn item."""
    from reaper.service import reaper

    ledger = _ledger(stack)
    turns = _turns(stack)
    turn = turn_logic.claim(turns, "acme", "agent-7", turn_id, token=None, required=False)  # token-less turn
    slot = ledger.reserve(
        tenant_id="acme",
        environment="default-public",
        source="cold",
        caps=CAPS,
        lease_seconds=60,
        turn_id=turn_id,
        agent_id="agent-7",
    ).slot_id
    iid = interpreter_id(stack)
    session_id, _ = lease.acquire_session(
        turns,
        turn,
        owner=f"inv-{turn_id}",
        interpreter_id=iid,
        start=lambda: reaper().runner("acme").start_session(iid, name=f"sbx-{turn_id}"),
        stop_previous=lambda i, s: True,
        max_session_age_seconds=600,
        wait_seconds=30,
    )
    assert ledger.activate(slot, session_id=session_id, interpreter_id=iid)
    return slot, session_id


def _running(stack: Stack, session_id: str) -> bool:
    session = stack.interpreter.session(session_id)
    return session is not None and session.status == "READY"


def test_reaper_stops_session_of_ended_turn_and_frees_slot(
    reaper_stack: Stack, capsys: pytest.CaptureFixture
) -> None:
    from reaper.handler import handler

    from tests.conftest import LambdaContext

    stack = reaper_stack
    # Given two live turns, one of which ended without its session being stopped (dispatch died
    # between "turn ended" and the stop)
    ended_slot, ended_session = _live_turn_session(stack, "turn-ended")
    live_slot, live_session = _live_turn_session(stack, "turn-live")
    _turns(stack).end("acme", "turn-ended")
    assert _ledger(stack).live_counts("acme") == (2, 2)
    capsys.readouterr()
    # When the scheduled reaper runs (an EventBridge scheduled event)
    out = handler({"source": "aws.events", "detail-type": "Scheduled Event"}, LambdaContext())
    # Then the ended turn's session is stopped and its slot freed; the live one is untouched
    assert out["sweep"]["by_reason"] == {"turn_ended": 1}
    assert not _running(stack, ended_session)
    assert _running(stack, live_session)
    assert [s.slot_id for s in slots_of(stack)] == [live_slot]
    assert _ledger(stack).live_counts("acme") == (1, 1)
    # And it was counted in the metric the alarm watches
    reaped = [r for r in emf_records(capsys.readouterr().out) if n.METRIC_SESSIONS_REAPED in r]
    assert len(reaped) == 1
    assert reaped[0]["reason"] == "turn_ended"


def test_reaper_frees_expired_start_lease_and_unowned_session(reaper_stack: Stack, monkeypatch) -> None:
    from reaper import sweep
    from reaper.service import reaper

    stack = reaper_stack
    ledger = _ledger(stack)
    # Given a start whose Lambda died (slot `starting`, lease already expired) ...
    ledger.reserve(
        tenant_id="acme",
        environment="default-public",
        source="cold",
        caps=CAPS,
        lease_seconds=-1,
        turn_id="turn-dead",
        agent_id="agent-7",
    )
    # ... and a session no turn owns (its turn item never recorded it), older than the grace
    iid = interpreter_id(stack)
    orphan_slot = ledger.reserve(
        tenant_id="acme",
        environment="default-public",
        source="cold",
        caps=CAPS,
        lease_seconds=60,
        turn_id="turn-never",
        agent_id="agent-7",
    ).slot_id
    orphan = reaper().runner("acme").start_session(iid, name="sbx-orphan")
    assert ledger.activate(orphan_slot, session_id=orphan, interpreter_id=iid)
    monkeypatch.setattr(sweep, "UNOWNED_GRACE_SECONDS", 0)
    # When the reaper runs
    summary = reaper().run()
    # Then both are reaped, each for its reason, and the tenant's capacity is whole again
    assert summary["sweep"]["by_reason"] == {"lease_expired": 1, "unowned": 1}
    assert not _running(stack, orphan)
    assert slots_of(stack) == []
    assert ledger.live_counts("acme") == (0, 0)


def test_refill_starts_warm_sessions_through_preamble_and_counts_them(reaper_stack: Stack) -> None:
    from reaper.service import reaper

    stack = reaper_stack
    # Given a warm pool of 2 for acme / default-public
    set_warm("acme", "default-public", 2)
    # When the reaper runs
    summary = reaper().run()
    # Then 2 warm sessions exist, are running, count against the caps, and a second run adds none
    warm = [s for s in slots_of(stack) if s.state == "warm"]
    assert summary["refill"]["started"] == 2
    assert len(warm) == 2
    assert all(_running(stack, s.session_id) for s in warm)
    assert {s.source for s in warm} == {"warm"}
    assert _ledger(stack).live_counts("acme") == (2, 2)
    assert reaper().run()["refill"]["started"] == 0
    # And the in-sandbox redactor the preamble installs already wraps stdout in each
    runner = reaper().runner("acme")
    result = runner.execute(
        warm[0].interpreter_id, warm[0].session_id, "import sys\nprint(type(sys.stdout).__name__)"
    )
    assert result.ok
    assert result.stdout.strip() != "TextIOWrapper"


def test_refill_never_offers_a_session_that_failed_its_preamble(reaper_stack: Stack, monkeypatch) -> None:
    from reaper.service import reaper
    from sandbox_common.redaction import stdio

    stack = reaper_stack
    # Given a preamble that does not print the readiness marker (an unmitigated session)
    monkeypatch.setattr(stdio, "preamble_source", lambda: "print('no marker here')")
    set_warm("acme", "default-public", 1)
    before = stack.live_sessions()  # the interpreter is shared with earlier tests
    # When the refill runs
    summary = reaper().run()
    # Then nothing is offered, the slot is released and no session is left running
    assert summary["refill"] == {"started": 0, "failed": 1, "trimmed": 0, "refused": {}}
    assert slots_of(stack) == []
    assert _ledger(stack).live_counts("acme") == (0, 0)
    assert stack.live_sessions() == before


def test_refill_respects_tenant_sessions_cap(reaper_stack: Stack) -> None:
    from reaper.service import reaper

    stack = reaper_stack
    # Given tenant_sessions 1 for acme and a desired pool of 3
    aws.client("ssm").put_parameter(
        Name=dimensions.parameter("local", dimensions.TENANT_SESSIONS.name, "acme"),
        Value="1",
        Type="String",
        Overwrite=True,
    )
    set_warm("acme", "default-public", 3)
    # When the refill runs
    summary = reaper().run()
    # Then only one warm session starts (warm sessions count against the caps)
    assert summary["refill"]["started"] == 1
    assert summary["refill"]["refused"] == {"acme#default-public": dimensions.TENANT_SESSIONS.name}
    assert len(slots_of(stack)) == 1


def test_reaper_recycles_unclaimed_warm_session_at_recycle_time(reaper_stack: Stack, monkeypatch) -> None:
    from reaper import refill
    from reaper.service import reaper

    stack = reaper_stack
    set_warm("acme", "default-public", 1)
    # Given a warm session whose recycle time has come (recycled immediately)
    monkeypatch.setattr(refill, "RECYCLE_MARGIN_SECONDS", 10_000)
    reaper().run()
    old = [s for s in slots_of(stack) if s.state == "warm"]
    assert len(old) == 1
    monkeypatch.setattr(refill, "RECYCLE_MARGIN_SECONDS", 60)
    time.sleep(1.1)
    # When the reaper runs again
    summary = reaper().run()
    # Then the old one was stopped and replaced by a fresh one
    assert summary["sweep"]["by_reason"] == {"recycled": 1}
    assert not _running(stack, old[0].session_id)
    fresh = [s for s in slots_of(stack) if s.state == "warm"]
    assert len(fresh) == 1
    assert fresh[0].session_id != old[0].session_id
