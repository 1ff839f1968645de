"""Where a first call's session comes from, with real parts: the
ledger and caps in moto, sessions in the local interpreter, the tenant's runner through STS."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from sandbox_common import aws, dimensions
from sandbox_common import naming as n
from sandbox_common.errors import SandboxCapExceeded
from sandbox_common.retries import RetryLog
from sandbox_common.sessions.caps import SessionCapReader
from sandbox_common.sessions.ledger import SessionLedger

from tests.reliability.faults import aws_response, error_body

from .conftest import Stack, interpreter_id, set_session_cap, set_warm, slots_of


def _source(stack: Stack) -> Any:
    from dispatch.sessions.source import SessionSource

    ledger = SessionLedger(table_name=stack.resources.tables[n.SESSIONS.logical], ddb=aws.client("dynamodb"))
    caps = SessionCapReader(stage="local", ssm=aws.client("ssm"), ttl_seconds=0)
    return SessionSource(
        ledger=ledger,
        caps_for=caps.caps_for,
        claim_min_life_seconds=180,
        lease_seconds=300,
        sleep=lambda s: None,
    )


def _runner(stack: Stack) -> Any:
    from reaper.service import reaper

    return reaper().runner("acme")


def _first_session(stack: Stack, turn: str, retries: RetryLog | None = None) -> Any:
    source = _source(stack)
    iid = interpreter_id(stack)
    log = retries or RetryLog()
    prepared = source.prepare(
        tenant_id="acme",
        agent_id="agent-7",
        turn_id=turn,
        environment="default-public",
        interpreter_id=iid,
        retries=log,
    )
    return source.start(
        prepared, runner=_runner(stack), interpreter_id=iid, invocation_id=str(uuid.uuid4()), retries=log
    )


def _count_starts(stack: Stack) -> list[str]:
    """Record every Start and every executeCode the runner's clients send (real requests; a
    botocore retry of one request, which a loaded machine can cause, is the same call)."""
    seen: list[str] = []
    runner = _runner(stack)

    def hook(request: Any, event_name: str = "", **_: Any) -> None:
        attempt = request.headers.get("amz-sdk-request", "attempt=1;")
        if "attempt=1;" in (attempt.decode() if isinstance(attempt, bytes) else attempt):
            seen.append(event_name.rsplit(".", 1)[-1])

    runner.credentials.control_client().meta.events.register("before-send.bedrock-agentcore", hook)
    runner.credentials.invoke_client().meta.events.register("before-send.bedrock-agentcore", hook)
    return seen


def test_first_call_with_warm_session_makes_no_start_and_no_preamble(reaper_stack: Stack) -> None:
    from reaper.service import reaper

    stack = reaper_stack
    # Given a warm pool of 1, filled by the reaper
    set_warm("acme", "default-public", 1)
    reaper().run()
    warm = [s for s in slots_of(stack) if s.state == "warm"]
    assert len(warm) == 1
    seen = _count_starts(stack)
    # When a turn's first call takes its session
    got = _first_session(stack, "turn-w")
    # Then it is the warm one, no Start and no readiness invoke was sent, and it runs code
    assert (got.source, got.session_id) == ("warm", warm[0].session_id)
    assert seen == []
    result = _runner(stack).execute(interpreter_id(stack), got.session_id, "print(6 * 7)")
    assert result.stdout == "42\n"
    # And the pool refills on the next reaper run (the claimed one now serves the turn)
    assert reaper().run()["refill"]["started"] == 1
    states = sorted((s.state, s.turn_id or "") for s in slots_of(stack))
    assert states == [("active", "turn-w"), ("warm", "")]


def test_first_call_without_warm_session_starts_cold_and_activates_slot(reaper_stack: Stack) -> None:
    stack = reaper_stack
    seen = _count_starts(stack)
    got = _first_session(stack, "turn-c")
    assert got.source == "cold"
    assert seen == ["StartCodeInterpreterSession", "InvokeCodeInterpreter"]  # Start + readiness preamble
    (slot,) = slots_of(stack)
    assert (slot.state, slot.session_id, slot.turn_id, slot.source) == (
        "active",
        got.session_id,
        "turn-c",
        "cold",
    )


def test_concurrent_first_calls_of_two_turns_never_share_a_warm_session(reaper_stack: Stack) -> None:
    from reaper.service import reaper

    stack = reaper_stack
    set_warm("acme", "default-public", 1)
    reaper().run()
    got: dict[str, Any] = {}

    def first(turn: str) -> None:
        got[turn] = _first_session(stack, turn)

    threads = [threading.Thread(target=first, args=(t,)) for t in ("turn-a", "turn-b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 2
    assert got["turn-a"].session_id != got["turn-b"].session_id
    assert sorted(g.source for g in got.values()) == ["cold", "warm"]


def test_tenant_sessions_cap_admits_exactly_cap_under_concurrency(reaper_stack: Stack) -> None:
    stack = reaper_stack
    # Given tenant_sessions 2 and 5 turns whose first calls arrive together
    set_session_cap(dimensions.TENANT_SESSIONS.name, 2, "acme")
    outcomes: list[str] = []
    lock = threading.Lock()

    def first(turn: str) -> None:
        source = _source(stack)
        try:
            source.prepare(
                tenant_id="acme",
                agent_id="agent-7",
                turn_id=turn,
                environment="default-public",
                interpreter_id=interpreter_id(stack),
                retries=RetryLog(),
            )
            outcome = "admitted"
        except SandboxCapExceeded as exc:
            outcome = str(exc.fields["dimension"])
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=first, args=(f"turn-{i}",)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["admitted"] * 2 + [dimensions.TENANT_SESSIONS.name] * 3
    assert len(slots_of(stack)) == 2


def test_session_cap_refusal_names_dimension_and_resets_in_30s(reaper_stack: Stack) -> None:
    from datetime import UTC, datetime

    stack = reaper_stack
    set_session_cap(dimensions.GLOBAL_SESSIONS.name, 0)
    live_before = stack.live_sessions()
    before = datetime.now(UTC)
    with pytest.raises(SandboxCapExceeded) as caught:
        _first_session(stack, "turn-x")
    body = caught.value.to_response()
    assert body["dimension"] == dimensions.GLOBAL_SESSIONS.name
    assert "global_sessions" in body["error_message"]
    resets = datetime.fromisoformat(body["resets_at"].replace("Z", "+00:00"))
    assert 25 <= (resets - before).total_seconds() <= 35
    assert slots_of(stack) == []
    assert stack.live_sessions() == live_before


def test_abandon_returns_warm_session_to_pool_and_releases_cold_slot(reaper_stack: Stack) -> None:
    from reaper.service import reaper

    stack = reaper_stack
    set_warm("acme", "default-public", 1)
    reaper().run()
    source = _source(stack)
    iid = interpreter_id(stack)
    warm = source.prepare(
        tenant_id="acme",
        agent_id="a",
        turn_id="t1",
        environment="default-public",
        interpreter_id=iid,
        retries=RetryLog(),
    )
    cold = source.prepare(
        tenant_id="acme",
        agent_id="a",
        turn_id="t2",
        environment="default-public",
        interpreter_id=iid,
        retries=RetryLog(),
    )
    assert (warm.source, cold.source) == ("warm", "cold")
    # When the quota refuses both calls
    source.abandon(warm)
    source.abandon(cold)
    # Then the warm session is back in the pool and the cold reservation is gone
    (slot,) = slots_of(stack)
    assert (slot.state, slot.session_id, slot.turn_id) == ("warm", warm.session_id, None)


def _throttle_starts(stack: Stack, times: int) -> list[int]:
    """The next `times` Start requests answer 429 ThrottlingException (AgentCore's wire shape)."""
    left = [times]
    runner = _runner(stack)

    def hook(request: Any, event_name: str = "", **_: Any) -> Any:
        if not event_name.endswith("StartCodeInterpreterSession") or left[0] <= 0:
            return None
        left[0] -= 1
        return aws_response(request.url, *error_body("rest-json", "throttling"))

    runner.credentials.control_client().meta.events.register("before-send.bedrock-agentcore", hook)
    return left


def test_throttled_start_is_retried_and_reported(reaper_stack: Stack) -> None:
    from sandbox_runtime.runner import credentials

    stack = reaper_stack
    # Given Start throttled for longer than botocore's own retries of one attempt
    attempts = credentials.CONTROL_RETRIES.get("max_attempts") or credentials.CONTROL_RETRIES.get(
        "total_max_attempts"
    )
    left = _throttle_starts(stack, int(attempts))
    log = RetryLog()
    # When the first call starts its session
    got = _first_session(stack, "turn-t", log)
    # Then it got one, and the retry it made on the agent's behalf is reported
    assert got.source == "cold"
    assert left == [0]
    assert [(e["reason"], e["attempt"]) for e in log.response_fields()["events"]] == [("start_throttled", 1)]


def test_service_quota_exceeded_on_start_answers_global_sessions(reaper_stack: Stack) -> None:
    stack = reaper_stack
    runner = _runner(stack)

    def hook(request: Any, event_name: str = "", **_: Any) -> Any:
        if event_name.endswith("StartCodeInterpreterSession"):
            return aws_response(
                request.url,
                402,
                {"Content-Type": "application/json", "x-amzn-ErrorType": "ServiceQuotaExceededException"},
                b'{"message": "quota"}',
            )
        return None

    runner.credentials.control_client().meta.events.register("before-send.bedrock-agentcore", hook)
    with pytest.raises(SandboxCapExceeded) as caught:
        _first_session(stack, "turn-q")
    assert caught.value.fields["dimension"] == dimensions.GLOBAL_SESSIONS.name
    assert slots_of(stack) == []  # the reservation was released
