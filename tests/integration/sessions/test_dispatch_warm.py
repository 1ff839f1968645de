"""Warm sessions THROUGH DISPATCH: a turn's first call takes a warm session
from the pool (once, never one that failed its preamble, given back on a quota refusal), and
begin_turn's hinted claim; on the shared real-parts harness, the reaper refilling the pool."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sandbox_common import aws, dimensions, limits
from sandbox_common import naming as n

from tests.reliability.faults import aws_response, error_body

from .conftest import (
    AgentCoreLog,
    Stack,
    daily_count,
    event,
    rows_by_call,
    set_warm,
    slots_of,
    together,
    turn_item,
)


def test_dispatch_warm_first_call_makes_no_start_no_preamble_and_pool_refills(reaper_stack: Stack) -> None:
    from reaper.service import reaper

    stack = reaper_stack
    # Given a warm pool of 1 for the template's environment, filled by the reaper
    set_warm("acme", "default-public", 1)
    assert reaper().run()["refill"]["started"] == 1
    (warm,) = slots_of(stack)
    log = AgentCoreLog()
    # When a turn's first call arrives through dispatch
    first = stack.dispatch(event(turn_id="turn-w", call_id="w1", code="print(6 * 7)"))
    # Then it ran on the warm session: no Start, no readiness preamble, and it says so
    assert (first["ok"], first["stdout"], first["session_id"]) == (True, "42\n", warm.session_id)
    assert first[n.FIELD_SESSION_SOURCE] == "warm"
    assert log.starts == 0
    assert log.preambles() == 0
    assert log.codes[0] == "print(6 * 7)"
    # And the audit row records it too
    assert rows_by_call(stack)["w1"][n.FIELD_SESSION_SOURCE] == "warm"
    # And a later call of the turn says nothing about its session's source
    later = stack.dispatch(event(turn_id="turn-w", call_id="w2", code="print(1)"))
    assert later["ok"] is True and n.FIELD_SESSION_SOURCE not in later
    # And the pool refills on the reaper's next run, the claimed session serving its turn
    assert reaper().run()["refill"]["started"] == 1
    states = sorted((s.state, s.turn_id or "") for s in slots_of(stack))
    assert states == [("active", "turn-w"), ("warm", "")]
    # And end_turn stops the warm session and frees its slot (one turn per warm session)
    assert stack.dispatch(event("end_turn", turn_id="turn-w")) == {"ok": True, "stopped": True}
    assert warm.session_id not in stack.live_sessions()
    assert [s.state for s in slots_of(stack)] == ["warm"]
    set_warm("acme", "default-public", 0)
    reaper().run()  # trims the pool: the shared interpreter keeps no session of this test


def test_dispatch_two_concurrent_first_calls_of_two_turns_never_share_a_session(reaper_stack: Stack) -> None:
    from reaper.service import reaper

    stack = reaper_stack
    # Given one warm session and two turns whose first calls arrive together
    set_warm("acme", "default-public", 1)
    reaper().run()
    set_warm("acme", "default-public", 0)  # no refill in between
    # When both run
    a, b = together(
        stack, [event(turn_id=t, call_id=f"{t}-1", code="print('hi')") for t in ("turn-a", "turn-b")]
    )
    # Then both ran, on two different sessions: one the warm one, one started cold
    assert a["ok"] is True and b["ok"] is True
    assert a["session_id"] != b["session_id"]
    assert sorted([a[n.FIELD_SESSION_SOURCE], b[n.FIELD_SESSION_SOURCE]]) == ["cold", "warm"]
    for turn in ("turn-a", "turn-b"):
        assert stack.dispatch(event("end_turn", turn_id=turn))["stopped"] is True
    assert slots_of(stack) == []


def test_dispatch_never_hands_out_a_warm_session_that_failed_its_preamble(
    reaper_stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reaper.service import reaper
    from sandbox_common.redaction import stdio

    stack = reaper_stack
    # Given a refill whose started session fails its readiness preamble (no marker printed)
    with monkeypatch.context() as patch:
        patch.setattr(stdio, "preamble_source", lambda: "print('no marker here')")
        set_warm("acme", "default-public", 1)
        assert reaper().run()["refill"]["failed"] == 1
    set_warm("acme", "default-public", 0)
    # When a turn's first call arrives
    first = stack.dispatch(event(turn_id="turn-p", call_id="p1", code="print(3)"))
    # Then it did not get that session: it started a mitigated one itself
    assert first["ok"] is True and first[n.FIELD_SESSION_SOURCE] == "cold"
    assert [(s.source, s.session_id) for s in slots_of(stack)] == [("cold", first["session_id"])]
    stack.dispatch(event("end_turn", turn_id="turn-p"))


def test_dispatch_quota_refusal_gives_the_warm_session_back(reaper_stack: Stack) -> None:
    from reaper.service import reaper

    stack = reaper_stack
    # Given one warm session and a tenant at its daily call cap (0 = kill switch)
    set_warm("acme", "default-public", 1)
    reaper().run()
    set_warm("acme", "default-public", 0)
    (warm,) = slots_of(stack)
    stack.set_cap(dimensions.TENANT_DAILY.name, 0)
    # When a turn's first call is refused by the quota
    refused = stack.dispatch(event(turn_id="turn-q", call_id="q1"))
    assert (refused["error"], refused["dimension"]) == ("SandboxCapExceeded", dimensions.TENANT_DAILY.name)
    # Then the warm session is back in its pool, unclaimed, and still running
    (slot,) = slots_of(stack)
    assert (slot.slot_id, slot.state, slot.turn_id) == (warm.slot_id, "warm", None)
    assert warm.session_id in stack.live_sessions()
    # And once calls are allowed again, the turn's next call gets that very session
    stack.set_cap(dimensions.TENANT_DAILY.name, 1000)
    again = stack.dispatch(event(turn_id="turn-q", call_id="q2"))
    assert (again["ok"], again["session_id"], again[n.FIELD_SESSION_SOURCE]) == (
        True,
        warm.session_id,
        "warm",
    )
    stack.dispatch(event("end_turn", turn_id="turn-q"))


def test_dispatch_concurrent_first_calls_of_one_turn_share_one_session(reaper_stack: Stack) -> None:
    from reaper.service import reaper

    stack = reaper_stack
    # Given two warm sessions and two first calls of the SAME turn arriving together
    set_warm("acme", "default-public", 2)
    reaper().run()
    set_warm("acme", "default-public", 0)
    a, b = together(stack, [event(turn_id="turn-s", call_id=c, code="print('x')") for c in ("s1", "s2")])
    # Then both ran in one session (the turn's only one); the other warm session went back
    assert a["ok"] is True and b["ok"] is True
    assert a["session_id"] == b["session_id"]
    states = sorted((s.state, s.turn_id or "") for s in slots_of(stack))
    assert states == [("active", "turn-s"), ("warm", "")]
    assert daily_count(stack) == 2
    stack.dispatch(event("end_turn", turn_id="turn-s"))
    set_warm("acme", "default-public", 0)
    reaper().run()  # trims the returned warm session
    assert slots_of(stack) == []


def test_dispatch_failed_warm_binding_never_returns_the_session_to_the_pool(reaper_stack: Stack) -> None:
    from reaper.service import reaper

    stack = reaper_stack
    # Given one warm session, and the turn-state write that binds it failing once (the write may
    # have applied or not: the caller cannot know)
    set_warm("acme", "default-public", 1)
    reaper().run()
    set_warm("acme", "default-public", 0)
    (warm,) = slots_of(stack)
    failed = [0]

    def fail_bind(request: Any, **_: Any) -> Any:
        if n.TURN_ATTR_SLOT_ID.encode() in (request.body or b"") and failed[0] == 0:
            failed[0] += 1
            return aws_response(request.url, *error_body("json", "access_denied"))
        return None

    aws.client("dynamodb").meta.events.register("before-send.dynamodb.UpdateItem", fail_bind)
    # When a turn's first call claims it
    answer = stack.dispatch(event(turn_id="turn-b", call_id="b1"))
    # Then the call fails (audited), and the session is stopped and freed, never offered again
    assert failed == [1]
    assert answer["ok"] is False and answer["error"] == "SandboxError"
    assert slots_of(stack) == []
    assert warm.session_id not in stack.live_sessions()
    # And the turn's next call gets a fresh session
    again = stack.dispatch(event(turn_id="turn-b", call_id="b2", code="print(5)"))
    assert again["ok"] is True and again["session_id"] != warm.session_id
    stack.dispatch(event("end_turn", turn_id="turn-b"))


def test_dispatch_begun_turns_first_calls_against_a_smaller_pool_get_distinct_sessions(
    reaper_stack: Stack,
) -> None:
    from reaper.service import reaper

    stack = reaper_stack
    # Given a pool of 2 warm sessions and 4 turns begun before any call (each noted a hint)
    set_warm("acme", "default-public", 2)
    assert reaper().run()["refill"]["started"] == 2
    set_warm("acme", "default-public", 0)  # no refill in between
    pool = {s.session_id for s in slots_of(stack)}
    turns = [f"turn-h{i}" for i in range(4)]
    for turn in turns:
        assert stack.dispatch(event("begin_turn", turn_id=turn))["ok"] is True
    hints = [turn_item(t).warm_hint for t in turns]
    assert len(hints) == 4 and all(h is not None and h["session_id"] in pool for h in hints), hints
    log = AgentCoreLog()
    # When their first calls arrive together
    answers = together(stack, [event(turn_id=t, call_id=f"{t}-1", code="print('hi')") for t in turns])
    # Then all ran, each on its own session: the 2 warm ones went to 2 turns, 2 turns started cold
    assert [a["ok"] for a in answers] == [True] * 4, answers
    assert len({a["session_id"] for a in answers}) == 4
    warm = [a for a in answers if a[n.FIELD_SESSION_SOURCE] == "warm"]
    assert {a["session_id"] for a in warm} == pool
    assert log.starts == 2
    # And every session's slot names exactly the turn that runs in it
    by_session = {s.session_id: s.turn_id for s in slots_of(stack)}
    assert {by_session[a["session_id"]] for a in answers} == set(turns)
    for turn in turns:
        assert stack.dispatch(event("end_turn", turn_id=turn))["stopped"] is True
    assert slots_of(stack) == []


def test_dispatch_hinted_warm_claim_refused_by_quota_stays_the_turns_session(reaper_stack: Stack) -> None:
    from reaper.service import reaper

    stack = reaper_stack
    # Given one warm session, a turn begun (hinted at it) and a tenant at its daily call cap
    set_warm("acme", "default-public", 1)
    reaper().run()
    set_warm("acme", "default-public", 0)
    (warm,) = slots_of(stack)
    assert stack.dispatch(event("begin_turn", turn_id="turn-q"))["ok"] is True
    stack.set_cap(dimensions.TENANT_DAILY.name, 0)
    before = daily_count(stack)
    # When its first call is refused by the quota
    refused = stack.dispatch(event(turn_id="turn-q", call_id="q1"))
    assert (refused["error"], refused["dimension"]) == ("SandboxCapExceeded", dimensions.TENANT_DAILY.name)
    # Then nothing was counted, and the session the claim bound stays the turn's (a concurrent call
    # of the turn may run in it, so it never goes back to a pool another turn claims from)
    assert daily_count(stack) == before
    (slot,) = slots_of(stack)
    assert (slot.slot_id, slot.state, slot.turn_id) == (warm.slot_id, "active", "turn-q")
    assert turn_item("turn-q").session_id == warm.session_id
    # And once calls are allowed again, the turn's next call runs in that very session
    stack.set_cap(dimensions.TENANT_DAILY.name, 1000)
    again = stack.dispatch(event(turn_id="turn-q", call_id="q2"))
    assert (again["ok"], again["session_id"]) == (True, warm.session_id)
    assert stack.dispatch(event("end_turn", turn_id="turn-q"))["stopped"] is True
    assert slots_of(stack) == []


def test_dispatch_first_call_after_begin_turn_found_the_pool_empty_does_not_read_it_again(
    reaper_stack: Stack,
) -> None:
    from reaper.service import reaper

    stack = reaper_stack
    # Given two turns begun while the pool was empty (each noted "empty", no hint)
    for turn in ("turn-e", "turn-g"):
        assert stack.dispatch(event("begin_turn", turn_id=turn))["ok"] is True
        noted = turn_item(turn)
        assert noted.warm_hint is None and noted.pool_empty is not None
    # And a warm session started since, and one turn's note aged past its window
    set_warm("acme", "default-public", 1)
    assert reaper().run()["refill"]["started"] == 1
    set_warm("acme", "default-public", 0)
    (warm,) = slots_of(stack)
    from dispatch import parts as dependencies

    table = dependencies.built().turns.table
    aged = str(int(time.time()) - limits.WARM_POOL_EMPTY_MARK_SECONDS - 5)
    aws.client("dynamodb").update_item(
        TableName=table,
        Key={n.TURNS.pk: {"S": "acme"}, n.TURNS.sort_key: {"S": "turn-g"}},
        UpdateExpression=f"SET {n.TURN_ATTR_POOL_EMPTY}.checked_at = :old",
        ExpressionAttributeValues={":old": {"S": aged}},
    )
    # When the fresh-noted turn's first call arrives
    fresh = stack.dispatch(event(turn_id="turn-e", call_id="e1", code="print(1)"))
    # Then it trusted the note: a cold start, the warm session left in its pool
    assert (fresh["ok"], fresh[n.FIELD_SESSION_SOURCE]) == (True, "cold")
    assert {s.slot_id: s.state for s in slots_of(stack)}[warm.slot_id] == "warm"
    # And the aged note is not trusted: that turn's first call reads the pool and claims the session
    aged_call = stack.dispatch(event(turn_id="turn-g", call_id="g1", code="print(2)"))
    assert (aged_call["ok"], aged_call[n.FIELD_SESSION_SOURCE], aged_call["session_id"]) == (
        True,
        "warm",
        warm.session_id,
    )
    for turn in ("turn-e", "turn-g"):
        assert stack.dispatch(event("end_turn", turn_id=turn))["stopped"] is True
    assert slots_of(stack) == []
