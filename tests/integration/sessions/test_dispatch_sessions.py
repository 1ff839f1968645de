"""Sessions as a managed resource THROUGH DISPATCH: session caps, slots,
cold starts and their retries, the reaper's stops (warm sessions: test_dispatch_warm.py), on the
shared real-parts harness: dispatch in-process, the session ledger and caps in moto, sessions in the
local interpreter, the quota Lambda in the emulator, the reaper in-process with its CDK environment."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sandbox_common import aws, dimensions
from sandbox_common import naming as n

from tests.reliability.faults import aws_response, error_body

from .conftest import (
    AgentCoreLog,
    Stack,
    daily_count,
    dispatch_runner,
    event,
    interpreter_id,
    on_start,
    rows_by_call,
    set_session_cap,
    slots_of,
    together,
    turn_item,
)


def test_dispatch_cold_first_call_starts_with_preamble_and_says_cold(stack: Stack) -> None:
    log = AgentCoreLog()
    # Given no warm pool, when a turn's first call arrives
    first = stack.dispatch(event(turn_id="turn-c", call_id="c1", code="print(2)"))
    # Then it started a session through the readiness preamble and says "cold"
    assert first["ok"] is True and first[n.FIELD_SESSION_SOURCE] == "cold"
    assert (log.starts, log.preambles()) == (1, 1)
    # And the session holds one slot in the ledger, bound to the turn
    (slot,) = slots_of(stack)
    assert (slot.state, slot.source, slot.session_id, slot.turn_id) == (
        "active",
        "cold",
        first["session_id"],
        "turn-c",
    )
    assert stack.dispatch(event("end_turn", turn_id="turn-c")) == {"ok": True, "stopped": True}
    assert slots_of(stack) == []


def test_dispatch_concurrent_first_calls_of_one_turn_share_its_session_at_a_session_cap(stack: Stack) -> None:
    # Given tenant_sessions = 1 for acme and 6 first calls of ONE turn arriving together (an
    # agent's parallel tool calls): each would hold a reservation until the turn's session started
    set_session_cap(dimensions.TENANT_SESSIONS.name, 1, "acme")
    live_before = set(stack.live_sessions())
    answers = together(
        stack, [event(turn_id="turn-par", call_id=f"par-{i}", code=f"print({i})") for i in range(6)]
    )
    # Then none is refused on the session cap: all ran, in the turn's one session, on one slot
    assert [a.get("error") for a in answers] == [None] * 6, answers
    assert len({a["session_id"] for a in answers}) == 1
    assert len(set(stack.live_sessions()) - live_before) == 1
    assert len(slots_of(stack)) == 1
    assert daily_count(stack) == 6
    stack.dispatch(event("end_turn", turn_id="turn-par"))


def test_dispatch_concurrent_first_calls_of_one_turn_wait_on_a_slow_lease_winner_at_a_session_cap(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dispatch.sessions import lease

    # Given tenant_sessions = 1 and a turn whose session lease is taken late (a loaded machine:
    # every call reaches the lease protocol seconds after its reservation)
    set_session_cap(dimensions.TENANT_SESSIONS.name, 1, "acme")
    real = lease.acquire_session

    def late(*args: Any, **kwargs: Any) -> Any:
        time.sleep(3)
        return real(*args, **kwargs)

    monkeypatch.setattr(lease, "acquire_session", late)
    # When 3 first calls of the turn arrive together
    answers = together(
        stack, [event(turn_id="turn-slow", call_id=f"slow-{i}", code=f"print({i})") for i in range(3)]
    )
    # Then the refused ones waited on the holder's reservation, not a timer: all ran in one session
    assert [a.get("error") for a in answers] == [None] * 3, answers
    assert len({a["session_id"] for a in answers}) == 1
    assert len(slots_of(stack)) == 1
    stack.dispatch(event("end_turn", turn_id="turn-slow"))


def test_dispatch_tenant_sessions_cap_admits_exactly_c_of_n_concurrent_turns(stack: Stack) -> None:
    # Given tenant_sessions = 2 for acme and 5 turns whose first calls arrive together
    set_session_cap(dimensions.TENANT_SESSIONS.name, 2, "acme")
    live_before = set(stack.live_sessions())
    turns = [f"turn-{i}" for i in range(5)]
    answers = dict(
        zip(
            turns,
            together(stack, [event(turn_id=t, call_id=f"{t}-1", code="print(1)") for t in turns]),
            strict=True,
        )
    )
    # Then exactly 2 ran; the 3 others were refused on tenant_sessions with nothing counted
    admitted = [t for t, a in answers.items() if a["ok"]]
    refused = [a for a in answers.values() if not a["ok"]]
    assert len(admitted) == 2
    assert [(a["error"], a["dimension"]) for a in refused] == [
        ("SandboxCapExceeded", dimensions.TENANT_SESSIONS.name)
    ] * 3
    assert daily_count(stack) == 2
    assert len(set(stack.live_sessions()) - live_before) == 2
    assert len(slots_of(stack)) == 2
    # And every call left its one audit row, the refused ones as cap_exceeded
    rows = rows_by_call(stack)
    assert sorted(r["exit_status"] for r in rows.values()) == ["cap_exceeded"] * 3 + ["ok"] * 2
    for turn in admitted:
        stack.dispatch(event("end_turn", turn_id=turn))


def test_dispatch_session_cap_zero_refuses_every_first_call_and_counts_nothing(stack: Stack) -> None:
    # Given a turn that already has its session, then global_sessions set to 0 (the kill switch)
    assert stack.dispatch(event(turn_id="turn-old", call_id="o1", code="x = 5"))["ok"] is True
    set_session_cap(dimensions.GLOBAL_SESSIONS.name, 0)
    from dispatch import parts as dependencies

    dependencies.reset()  # a fresh container: no cap cached
    live_before = stack.live_sessions()
    counted_before = daily_count(stack)
    # When a new turn's first call arrives
    refused = stack.dispatch(event(turn_id="turn-new", call_id="n1", code="print(1)"))
    # Then it is refused on global_sessions, retry in 30 s; nothing counted, no session started
    assert (refused["error"], refused["dimension"]) == ("SandboxCapExceeded", dimensions.GLOBAL_SESSIONS.name)
    assert dimensions.GLOBAL_SESSIONS.name in refused["error_message"]
    assert daily_count(stack) == counted_before
    assert stack.live_sessions() == live_before
    assert len(slots_of(stack)) == 1  # the old turn's
    assert rows_by_call(stack)["n1"]["exit_status"] == "cap_exceeded"
    # And the turn that has its session goes on (a cap bounds sessions, not calls)
    later = stack.dispatch(event(turn_id="turn-old", call_id="o2", code="print(x)"))
    assert later["ok"] is True and later["stdout"] == "5\n"
    stack.dispatch(event("end_turn", turn_id="turn-old"))


def test_dispatch_background_submit_at_session_cap_zero_counts_nothing_and_holds_no_job(stack: Stack) -> None:
    # Given global_sessions = 0 (the kill switch) in a fresh container
    set_session_cap(dimensions.GLOBAL_SESSIONS.name, 0)
    from dispatch import parts as dependencies

    dependencies.reset()
    live_before, counted_before = stack.live_sessions(), daily_count(stack)
    # When a new turn's first call is a background job
    refused = stack.dispatch(
        event(turn_id="turn-job", call_id="j1", code="print(1)", background=True, timeout_s=60)
    )
    # Then it is refused on global_sessions BEFORE the quota: nothing counted, no session, no job
    assert (refused["error"], refused["dimension"]) == ("SandboxCapExceeded", dimensions.GLOBAL_SESSIONS.name)
    assert "job_id" not in refused
    assert daily_count(stack) == counted_before
    assert stack.live_sessions() == live_before
    assert slots_of(stack) == []
    jobs = aws.client("dynamodb").scan(TableName=n.JOBS.physical("local"))["Items"]
    assert [j for j in jobs if n.JOB_ATTR_OPEN in j] == []  # the reserved job slot was given back
    assert rows_by_call(stack)["j1"]["exit_status"] == "cap_exceeded"


def test_dispatch_stopped_session_frees_its_slot_on_end_turn(stack: Stack) -> None:
    # Given tenant_sessions = 1, held by turn-1's session
    set_session_cap(dimensions.TENANT_SESSIONS.name, 1, "acme")
    assert stack.dispatch(event(turn_id="turn-1", call_id="a1"))["ok"] is True
    full = stack.dispatch(event(turn_id="turn-2", call_id="b1"))
    assert full["dimension"] == dimensions.TENANT_SESSIONS.name
    # When turn-1 ends (its session is stopped)
    assert stack.dispatch(event("end_turn", turn_id="turn-1")) == {"ok": True, "stopped": True}
    # Then its slot is free: turn-2's next call gets a session
    again = stack.dispatch(event(turn_id="turn-2", call_id="b2"))
    assert again["ok"] is True and again[n.FIELD_SESSION_SOURCE] == "cold"
    assert [s.turn_id for s in slots_of(stack)] == ["turn-2"]
    stack.dispatch(event("end_turn", turn_id="turn-2"))
    assert slots_of(stack) == []


def test_dispatch_session_stopped_by_timeout_frees_its_slot(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dispatch import parts as dependencies
    from sandbox_common import settings

    # Given a 2 s per-call deadline and tenant_sessions = 1
    monkeypatch.setenv(n.ENV_CALL_TIMEOUT, "2")
    settings.clear_caches()
    dependencies.reset()
    set_session_cap(dimensions.TENANT_SESSIONS.name, 1, "acme")
    # When turn-1's call runs past the deadline with the session's own stop blocked (so the runner's
    # deadline ends it and stops its session)
    code = "import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\ntime.sleep(30)"
    slow = stack.dispatch(event(turn_id="turn-1", call_id="a1", code=code))
    assert slow["exit_status"] == "timeout"
    # Then the slot is free: another turn gets a session
    assert slots_of(stack) == []
    other = stack.dispatch(event(turn_id="turn-2", call_id="b1"))
    assert other["ok"] is True
    stack.dispatch(event("end_turn", turn_id="turn-2"))


def test_dispatch_reaped_session_restart_is_a_visible_retry(stack: Stack) -> None:
    # Given a turn whose session AgentCore reaped behind our back
    first = stack.dispatch(event(turn_id="turn-r", call_id="r1", code="print('one')"))
    assert "events" not in first  # no retry, no events field
    aws.client("bedrock-agentcore").stop_code_interpreter_session(
        codeInterpreterIdentifier=interpreter_id(stack), sessionId=first["session_id"]
    )
    # When the next call arrives
    second = stack.dispatch(event(turn_id="turn-r", call_id="r2", code="print('two')"))
    # Then it ran once in a new session and reports the retry made on the agent's behalf
    assert second["ok"] is True and second["stdout"] == "two\n"
    assert [(e["type"], e["reason"], e["attempt"]) for e in second["events"]] == [
        (n.EVENT_RETRYING, n.RETRY_SESSION_REAPED, 1)
    ]
    assert second["events"][0]["at"].endswith("Z")
    # And the audit row records the same retries; the reaped session's slot is freed
    rows = rows_by_call(stack)
    assert rows["r2"][n.AUDIT_ATTR_RETRIES] == second["events"]
    assert rows["r1"][n.AUDIT_ATTR_RETRIES] == []
    assert [s.session_id for s in slots_of(stack)] == [second["session_id"]]
    stack.dispatch(event("end_turn", turn_id="turn-r"))


def test_dispatch_throttled_start_is_a_visible_retry(stack: Stack) -> None:
    from sandbox_runtime.runner import credentials

    # Given Start throttled for longer than botocore's own retries of one attempt
    attempts = int(
        credentials.CONTROL_RETRIES.get("max_attempts") or credentials.CONTROL_RETRIES["total_max_attempts"]
    )
    left = [attempts]

    def throttle(request: Any, event_name: str = "", **_: Any) -> Any:
        if not event_name.endswith("StartCodeInterpreterSession") or left[0] <= 0:
            return None
        left[0] -= 1
        return aws_response(request.url, *error_body("rest-json", "throttling"))

    dispatch_runner().credentials.control_client().meta.events.register(
        "before-send.bedrock-agentcore", throttle
    )
    # When a turn's first call starts its session
    first = stack.dispatch(event(turn_id="turn-t", call_id="t1", code="print(1)"))
    # Then it ran, and the retried Start is in its events and its audit row
    assert first["ok"] is True and left == [0]
    assert [(e["reason"], e["attempt"]) for e in first["events"]] == [(n.RETRY_START_THROTTLED, 1)]
    assert rows_by_call(stack)["t1"][n.AUDIT_ATTR_RETRIES] == first["events"]
    stack.dispatch(event("end_turn", turn_id="turn-t"))


def test_reaper_stops_ended_turn_session_spares_live_and_job_busy(
    reaper_stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dispatch import parts as dependencies
    from reaper.service import reaper

    stack = reaper_stack
    # Given three turns with sessions started through dispatch: a live one, one whose end_turn
    # closed the turn but died before the stop, and one that ended with a background job running
    live = stack.dispatch(event(turn_id="turn-live", call_id="l1"))["session_id"]
    ended = stack.dispatch(event(turn_id="turn-ended", call_id="e1"))["session_id"]
    dependencies.built().turns.end("acme", "turn-ended")
    job = stack.dispatch(
        event(turn_id="turn-job", call_id="j1", background=True, code="import time\ntime.sleep(600)")
    )
    assert job["status"] == "running"
    assert stack.dispatch(event("end_turn", turn_id="turn-job"))["pending_jobs"] == [job["job_id"]]
    # When the reaper sweeps
    summary = reaper().run()["sweep"]
    # Then only the ended turn's session is stopped and its slot freed
    assert summary["by_reason"] == {"turn_ended": 1}
    assert summary["spared_for_jobs"] == 1
    running = set(stack.live_sessions())
    assert ended not in running
    assert {live, job["session_id"]} <= running
    assert sorted(s.turn_id for s in slots_of(stack)) == ["turn-job", "turn-live"]
    # And once the job is cancelled (its session stopped), the next sweep frees the slot
    cancel = {
        "action": "cancel_job",
        "tenant_id": "acme",
        "agent_id": "agent-7",
        "turn_id": "turn-job",
        "job_id": job["job_id"],
        "turn_token": event(turn_id="turn-job")["turn_token"],
    }
    assert stack.dispatch(cancel)["status"] == "cancelled"
    deadline = time.monotonic() + 60
    while job["session_id"] in stack.live_sessions() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert reaper().run()["sweep"]["by_reason"] == {"turn_ended": 1}
    assert [s.turn_id for s in slots_of(stack)] == ["turn-live"]
    # And a session past the interpreter's session timeout (AgentCore reaps it) is freed as expired
    from reaper import service

    later = time.time() + service.reaper().settings.session_timeout_seconds + 5
    monkeypatch.setattr(service.time, "time", lambda: later)
    assert reaper().run()["sweep"]["by_reason"] == {"lease_expired": 1}
    assert slots_of(stack) == []
    assert live not in stack.live_sessions()


def test_dispatch_cold_first_call_whose_turn_ended_during_start_fails_closed_and_leaks_nothing(
    stack: Stack,
) -> None:
    from dispatch import parts as dependencies

    # Given a turn begun with an empty pool, and end_turn landing while its first call starts a session
    assert stack.dispatch(event("begin_turn", turn_id="turn-x"))["ok"] is True
    log = AgentCoreLog()
    ended = on_start(lambda: dependencies.built().turns.end("acme", "turn-x"))
    # When the first call runs (its "active" write travels beside the user code)
    answer = stack.dispatch(event(turn_id="turn-x", call_id="x1", code="print('ran')"))
    # Then the code was sent beside the activation (not after it), and the call failed closed:
    # the turn's "active" write was refused (ended), so the session is not the turn's
    assert ended == [1]
    assert "print('ran')" in log.codes
    assert (answer["ok"], answer["error"]) == (False, "SandboxError")
    assert "stdout" not in answer or answer["stdout"] in ("", None)
    row = rows_by_call(stack)["x1"]
    assert row["failure_reason"] == "turn_store_unavailable:session lease lost before activation"
    # And nothing leaked: the session is stopped, its slot freed, the turn points at no live session
    assert answer["session_id"] not in stack.live_sessions()
    assert slots_of(stack) == []
    turn = turn_item("turn-x")
    assert turn.ended and not turn.live_session and turn.lease_owner is None


def test_dispatch_cold_first_call_whose_slot_was_released_during_start_fails_closed_and_recovers(
    stack: Stack,
) -> None:
    from dispatch import parts as dependencies

    # Given the reaper releasing a first call's slot while its Start runs (as for an expired lease)
    def reaper_releases() -> None:
        (slot,) = slots_of(stack)
        assert dependencies.built().sessions.source.ledger.release(slot.slot_id)

    log = AgentCoreLog()
    released = on_start(reaper_releases)
    # When the first call runs (its slot activation travels beside the user code)
    answer = stack.dispatch(event(turn_id="turn-l", call_id="l1", code="print('ran')"))
    # Then the code was sent, and the call failed closed: the session ran unaccounted for a moment only
    assert released == [1]
    assert "print('ran')" in log.codes
    assert (answer["ok"], answer["error"]) == (False, "SandboxError")
    assert rows_by_call(stack)["l1"]["failure_reason"] == "session_slot_lost"
    # And nothing leaked: the session is stopped, no slot is held, the turn points away from it
    assert answer["session_id"] not in stack.live_sessions()
    assert slots_of(stack) == []
    assert not turn_item("turn-l").live_session
    # And the turn's next call gets a fresh session, accounted in the ledger
    again = stack.dispatch(event(turn_id="turn-l", call_id="l2", code="print(3)"))
    assert (again["ok"], again["stdout"]) == (True, "3\n")
    assert again["session_id"] != answer["session_id"]
    (slot,) = slots_of(stack)
    assert (slot.state, slot.session_id, slot.turn_id) == ("active", again["session_id"], "turn-l")
    assert stack.dispatch(event("end_turn", turn_id="turn-l"))["stopped"] is True
    assert slots_of(stack) == []


def test_dispatch_concurrent_cold_first_calls_of_one_begun_turn_share_one_session(stack: Stack) -> None:
    # Given a turn begun with an empty pool and two first calls of it arriving together
    assert stack.dispatch(event("begin_turn", turn_id="turn-2c"))["ok"] is True
    log = AgentCoreLog()
    a, b = together(stack, [event(turn_id="turn-2c", call_id=c, code="print('x')") for c in ("c1", "c2")])
    # Then both ran in one cold session (the waiter ran once the winner's "active" write, sent
    # beside its code, landed); one Start, one slot, the loser's reservation given back
    assert (a["ok"], b["ok"]) == (True, True), (a, b)
    assert a["session_id"] == b["session_id"]
    assert log.starts == 1 and log.preambles() == 1
    (slot,) = slots_of(stack)
    assert (slot.state, slot.session_id, slot.turn_id) == ("active", a["session_id"], "turn-2c")
    assert daily_count(stack) == 2
    assert stack.dispatch(event("end_turn", turn_id="turn-2c"))["stopped"] is True
    assert slots_of(stack) == []
