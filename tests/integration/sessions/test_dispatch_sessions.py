"""Sessions as a managed resource THROUGH DISPATCH (SPEC §16.1, §16.2, §16.3, §16.6), on the shared
real-parts harness: dispatch in-process, the session ledger and caps in moto, sessions in the local
interpreter, the quota Lambda in the emulator, the reaper in-process with its CDK environment."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sandbox_common import aws, dimensions, limits
from sandbox_common import naming as n

from tests.reliability.faults import aws_response, error_body
from tests.support.runner import cell_arguments

from .conftest import Stack, event, interpreter_id, set_session_cap, set_warm, slots_of


def _together(stack: Stack, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every event dispatched at the same moment (threads released by one barrier); answers in order."""
    barrier = threading.Barrier(len(events))

    def send(request: dict[str, Any]) -> dict[str, Any]:
        barrier.wait()
        return stack.dispatch(request)

    with ThreadPoolExecutor(max_workers=len(events)) as pool:
        return list(pool.map(send, events))


def _dispatch_runner() -> Any:
    """The tenant runner dispatch itself uses (its cached clients are the ones dispatch calls)."""
    from dispatch import parts as dependencies

    d = dependencies.built()
    return d.runners(d.preflight.check("acme", "analyst"))


CELL_DRIVER_START = "def _sbx_cell("


class AgentCoreLog:
    """Every Start, and the code of every executeCode, that dispatch's runner sends (real requests)."""

    def __init__(self) -> None:
        self.starts = 0
        self.codes: list[str] = []
        runner = _dispatch_runner()
        runner.credentials.control_client().meta.events.register(
            "before-parameter-build.bedrock-agentcore.StartCodeInterpreterSession", self._start
        )
        runner.credentials.invoke_client().meta.events.register(
            "before-parameter-build.bedrock-agentcore.InvokeCodeInterpreter", self._invoke
        )

    def _start(self, **_: Any) -> None:
        self.starts += 1

    def _invoke(self, params: dict[str, Any], **_: Any) -> None:
        """The code sent; for a Python call, the user code its driver carries."""
        code = str((params.get("arguments") or {}).get("code", ""))
        if code.startswith(CELL_DRIVER_START):
            code = cell_arguments(code)[1]
        self.codes.append(code)

    def preambles(self) -> int:
        from sandbox_runtime.runner.session import readiness_source

        return self.codes.count(readiness_source())


def _rows(stack: Stack) -> dict[str, dict[str, Any]]:
    return {r["call_id"]: r for r in stack.audit_rows()}


def _daily_count(stack: Stack) -> int:
    return sum(
        int(i[n.COUNTER_ATTR_COUNT]["N"]) for i in stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical]
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
    assert _rows(stack)["w1"][n.FIELD_SESSION_SOURCE] == "warm"
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


def test_dispatch_two_concurrent_first_calls_of_two_turns_never_share_a_session(reaper_stack: Stack) -> None:
    from reaper.service import reaper

    stack = reaper_stack
    # Given one warm session and two turns whose first calls arrive together
    set_warm("acme", "default-public", 1)
    reaper().run()
    set_warm("acme", "default-public", 0)  # no refill in between
    # When both run
    a, b = _together(
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


def test_dispatch_concurrent_first_calls_of_one_turn_share_its_session_at_a_session_cap(stack: Stack) -> None:
    # Given tenant_sessions = 1 for acme and 6 first calls of ONE turn arriving together (an
    # agent's parallel tool calls): each would hold a reservation until the turn's session started
    set_session_cap(dimensions.TENANT_SESSIONS.name, 1, "acme")
    live_before = set(stack.live_sessions())
    answers = _together(
        stack, [event(turn_id="turn-par", call_id=f"par-{i}", code=f"print({i})") for i in range(6)]
    )
    # Then none is refused on the session cap: all ran, in the turn's one session, on one slot
    assert [a.get("error") for a in answers] == [None] * 6, answers
    assert len({a["session_id"] for a in answers}) == 1
    assert len(set(stack.live_sessions()) - live_before) == 1
    assert len(slots_of(stack)) == 1
    assert _daily_count(stack) == 6
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
    answers = _together(
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
            _together(stack, [event(turn_id=t, call_id=f"{t}-1", code="print(1)") for t in turns]),
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
    assert _daily_count(stack) == 2
    assert len(set(stack.live_sessions()) - live_before) == 2
    assert len(slots_of(stack)) == 2
    # And every call left its one audit row, the refused ones as cap_exceeded
    rows = _rows(stack)
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
    counted_before = _daily_count(stack)
    # When a new turn's first call arrives
    refused = stack.dispatch(event(turn_id="turn-new", call_id="n1", code="print(1)"))
    # Then it is refused on global_sessions, retry in 30 s; nothing counted, no session started
    assert (refused["error"], refused["dimension"]) == ("SandboxCapExceeded", dimensions.GLOBAL_SESSIONS.name)
    assert dimensions.GLOBAL_SESSIONS.name in refused["error_message"]
    assert _daily_count(stack) == counted_before
    assert stack.live_sessions() == live_before
    assert len(slots_of(stack)) == 1  # the old turn's
    assert _rows(stack)["n1"]["exit_status"] == "cap_exceeded"
    # And the turn that has its session goes on (a cap bounds sessions, not calls)
    later = stack.dispatch(event(turn_id="turn-old", call_id="o2", code="print(x)"))
    assert later["ok"] is True and later["stdout"] == "5\n"
    stack.dispatch(event("end_turn", turn_id="turn-old"))


def test_dispatch_background_submit_at_session_cap_zero_counts_nothing_and_holds_no_job(stack: Stack) -> None:
    # Given global_sessions = 0 (the kill switch) in a fresh container
    set_session_cap(dimensions.GLOBAL_SESSIONS.name, 0)
    from dispatch import parts as dependencies

    dependencies.reset()
    live_before, counted_before = stack.live_sessions(), _daily_count(stack)
    # When a new turn's first call is a background job
    refused = stack.dispatch(
        event(turn_id="turn-job", call_id="j1", code="print(1)", background=True, timeout_s=60)
    )
    # Then it is refused on global_sessions BEFORE the quota: nothing counted, no session, no job
    assert (refused["error"], refused["dimension"]) == ("SandboxCapExceeded", dimensions.GLOBAL_SESSIONS.name)
    assert "job_id" not in refused
    assert _daily_count(stack) == counted_before
    assert stack.live_sessions() == live_before
    assert slots_of(stack) == []
    jobs = aws.client("dynamodb").scan(TableName=n.JOBS.physical("local"))["Items"]
    assert [j for j in jobs if n.JOB_ATTR_OPEN in j] == []  # the reserved job slot was given back
    assert _rows(stack)["j1"]["exit_status"] == "cap_exceeded"


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
    rows = _rows(stack)
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

    _dispatch_runner().credentials.control_client().meta.events.register(
        "before-send.bedrock-agentcore", throttle
    )
    # When a turn's first call starts its session
    first = stack.dispatch(event(turn_id="turn-t", call_id="t1", code="print(1)"))
    # Then it ran, and the retried Start is in its events and its audit row
    assert first["ok"] is True and left == [0]
    assert [(e["reason"], e["attempt"]) for e in first["events"]] == [(n.RETRY_START_THROTTLED, 1)]
    assert _rows(stack)["t1"][n.AUDIT_ATTR_RETRIES] == first["events"]
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
    a, b = _together(stack, [event(turn_id="turn-s", call_id=c, code="print('x')") for c in ("s1", "s2")])
    # Then both ran in one session (the turn's only one); the other warm session went back
    assert a["ok"] is True and b["ok"] is True
    assert a["session_id"] == b["session_id"]
    states = sorted((s.state, s.turn_id or "") for s in slots_of(stack))
    assert states == [("active", "turn-s"), ("warm", "")]
    assert _daily_count(stack) == 2
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


def _turn_item(turn_id: str) -> Any:
    from dispatch import parts as dependencies

    return dependencies.built().turns.get("acme", turn_id)


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
    hints = [_turn_item(t).warm_hint for t in turns]
    assert len(hints) == 4 and all(h is not None and h["session_id"] in pool for h in hints), hints
    log = AgentCoreLog()
    # When their first calls arrive together
    answers = _together(stack, [event(turn_id=t, call_id=f"{t}-1", code="print('hi')") for t in turns])
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
    before = _daily_count(stack)
    # When its first call is refused by the quota
    refused = stack.dispatch(event(turn_id="turn-q", call_id="q1"))
    assert (refused["error"], refused["dimension"]) == ("SandboxCapExceeded", dimensions.TENANT_DAILY.name)
    # Then nothing was counted, and the session the claim bound stays the turn's (a concurrent call
    # of the turn may run in it, so it never goes back to a pool another turn claims from)
    assert _daily_count(stack) == before
    (slot,) = slots_of(stack)
    assert (slot.slot_id, slot.state, slot.turn_id) == (warm.slot_id, "active", "turn-q")
    assert _turn_item("turn-q").session_id == warm.session_id
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
        noted = _turn_item(turn)
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


def _on_start(action: Any) -> list[int]:
    """Run `action()` once, when dispatch's runner sends its next StartCodeInterpreterSession."""
    ran: list[int] = []

    def hook(**_: Any) -> None:
        if not ran:
            ran.append(1)
            action()

    _dispatch_runner().credentials.control_client().meta.events.register(
        "before-parameter-build.bedrock-agentcore.StartCodeInterpreterSession", hook
    )
    return ran


def test_dispatch_cold_first_call_whose_turn_ended_during_start_fails_closed_and_leaks_nothing(
    stack: Stack,
) -> None:
    from dispatch import parts as dependencies

    # Given a turn begun with an empty pool, and end_turn landing while its first call starts a session
    assert stack.dispatch(event("begin_turn", turn_id="turn-x"))["ok"] is True
    log = AgentCoreLog()
    ended = _on_start(lambda: dependencies.built().turns.end("acme", "turn-x"))
    # When the first call runs (its "active" write travels beside the user code)
    answer = stack.dispatch(event(turn_id="turn-x", call_id="x1", code="print('ran')"))
    # Then the code was sent beside the activation (not after it), and the call failed closed:
    # the turn's "active" write was refused (ended), so the session is not the turn's
    assert ended == [1]
    assert "print('ran')" in log.codes
    assert (answer["ok"], answer["error"]) == (False, "SandboxError")
    assert "stdout" not in answer or answer["stdout"] in ("", None)
    row = _rows(stack)["x1"]
    assert row["failure_reason"] == "turn_store_unavailable:session lease lost before activation"
    # And nothing leaked: the session is stopped, its slot freed, the turn points at no live session
    assert answer["session_id"] not in stack.live_sessions()
    assert slots_of(stack) == []
    turn = _turn_item("turn-x")
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
    released = _on_start(reaper_releases)
    # When the first call runs (its slot activation travels beside the user code)
    answer = stack.dispatch(event(turn_id="turn-l", call_id="l1", code="print('ran')"))
    # Then the code was sent, and the call failed closed: the session ran unaccounted for a moment only
    assert released == [1]
    assert "print('ran')" in log.codes
    assert (answer["ok"], answer["error"]) == (False, "SandboxError")
    assert _rows(stack)["l1"]["failure_reason"] == "session_slot_lost"
    # And nothing leaked: the session is stopped, no slot is held, the turn points away from it
    assert answer["session_id"] not in stack.live_sessions()
    assert slots_of(stack) == []
    assert not _turn_item("turn-l").live_session
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
    a, b = _together(stack, [event(turn_id="turn-2c", call_id=c, code="print('x')") for c in ("c1", "c2")])
    # Then both ran in one cold session (the waiter ran once the winner's "active" write, sent
    # beside its code, landed); one Start, one slot, the loser's reservation given back
    assert (a["ok"], b["ok"]) == (True, True), (a, b)
    assert a["session_id"] == b["session_id"]
    assert log.starts == 1 and log.preambles() == 1
    (slot,) = slots_of(stack)
    assert (slot.state, slot.session_id, slot.turn_id) == ("active", a["session_id"], "turn-2c")
    assert _daily_count(stack) == 2
    assert stack.dispatch(event("end_turn", turn_id="turn-2c"))["stopped"] is True
    assert slots_of(stack) == []
