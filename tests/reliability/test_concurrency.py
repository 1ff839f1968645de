"""Concurrency through the real stack: many threads on one tenant/agent/turn.

dispatch runs in-process on many threads (as many warm containers would), the quota Lambda in
the emulator's worker processes, DynamoDB/SSM in moto's server, sessions in the local interpreter.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sandbox_common import dimensions
from sandbox_common import naming as n

from tests.support.stack import Stack, event


@pytest.fixture
def sizes(reliability_full: bool) -> tuple[int, int]:
    """(threads, cap): more callers than the cap admits."""
    return (32, 10) if reliability_full else (8, 3)


def _parallel(stack: Stack, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with ThreadPoolExecutor(max_workers=len(events)) as pool:
        return list(pool.map(stack.dispatch, events))


def test_concurrency_cap_admits_exactly_cap_and_one_session_per_turn(
    live: Stack, sizes: tuple[int, int], record: Any
) -> None:
    stack = live
    threads, cap = sizes
    # Given a tenant daily cap C and one fresh turn
    stack.set_cap(dimensions.TENANT_DAILY.name, cap, tenant_id="acme")
    before = set(stack.live_sessions())
    turn = {"agent_id": "agent-race", "turn_id": "turn-race"}
    # When N > C first calls of that turn arrive at once
    results = _parallel(
        stack, [event(call_id=f"race-{i}", code=f"print({i})", **turn) for i in range(threads)]
    )
    # Then exactly C are admitted and the rest refused on the daily dimension
    admitted = [r for r in results if r["ok"]]
    refused = [r for r in results if r.get("error") == "SandboxCapExceeded"]
    sessions = {r["session_id"] for r in admitted}
    started = set(stack.live_sessions()) - before
    rows = [r for r in stack.audit_rows("acme") if r["turn_id"] == "turn-race"]
    daily = [
        int(i[n.COUNTER_ATTR_COUNT]["N"])
        for i in stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical]
        if i.get(n.COUNTER_ATTR_TENANT, {}).get("S") == "acme"
    ]
    stack.dispatch(event("end_turn", turn_id="turn-race"))
    stack.set_cap(dimensions.TENANT_DAILY.name, 1000, tenant_id="acme")
    record(
        "concurrency",
        scenario="cap C, N > C concurrent first calls of one turn",
        threads=threads,
        calls=threads,
        figures=f"cap {cap}: admitted {len(admitted)}, refused {len(refused)}, counter {daily}, "
        f"sessions started {len(started)}, audit rows {len(rows)}",
    )
    assert len(admitted) == cap, [r.get("error_message") for r in results if not r["ok"]]
    assert len(refused) == threads - cap and {r["dimension"] for r in refused} == {
        dimensions.TENANT_DAILY.name
    }
    assert daily == [cap]
    # And all admitted calls of the turn share ONE session: no orphaned second Start
    assert len(sessions) == 1 and len(started) == 1
    # And one audit row per call, whatever its outcome
    assert len(rows) == threads and len({r["call_id"] for r in rows}) == threads


def test_concurrency_idempotent_retries_race_their_original(
    live: Stack, sizes: tuple[int, int], record: Any
) -> None:
    stack = live
    threads, _ = sizes
    turn = {"tenant_id": "globex", "agent_id": "agent-retry", "turn_id": "turn-retry"}
    code = "runs = globals().get('runs', 0) + 1\nprint('ran', runs)"
    # When the same call (same call_id, same code) arrives N times at once
    results = _parallel(stack, [event(call_id="retry-1", code=code, **turn) for _ in range(threads)])
    # Then every copy gets the first result or, while the original still runs, call_in_progress
    # at once; the code ran once, one row, one count
    after = stack.dispatch(event(call_id="retry-2", code="print(runs)", **turn))
    rows = [r for r in stack.audit_rows("globex") if r["call_id"] == "retry-1"]
    counts = [
        int(i[n.COUNTER_ATTR_COUNT]["N"])
        for i in stack.counter_items()[n.AGENT_HOURLY_COUNTERS.logical]
        if i.get(n.COUNTER_ATTR_AGENT, {}).get("S") == "agent-retry"
    ]
    stack.dispatch(event("end_turn", tenant_id="globex", turn_id="turn-retry"))
    answered = [r for r in results if r.get("reason") != n.REASON_CALL_IN_PROGRESS]
    distinct = {repr(sorted(r.items())) for r in answered}
    record(
        "concurrency",
        scenario="same call_id sent N times at once (retries racing the original)",
        threads=threads,
        calls=threads + 1,
        figures=f"distinct responses {len(distinct)}, runs seen by the "
        f"session {after.get('stdout', '').strip()!r}, audit rows {len(rows)}, agent counter {counts}",
    )
    assert answered[0]["ok"] is True and answered[0]["stdout"] == "ran 1\n", answered[0]
    assert len(distinct) == 1
    assert after["stdout"] == "1\n"
    assert len(rows) == 1
    assert counts == [2]  # retry-1 once + retry-2
