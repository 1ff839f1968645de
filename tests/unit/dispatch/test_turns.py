"""Turn ownership and one-session-per-turn, against moto's real server."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from dispatch.sessions import lease
from dispatch.turns import flow as turn_logic
from dispatch.turns.store import TurnStore, TurnStoreUnavailable
from sandbox_common import messages
from sandbox_common import naming as n
from sandbox_common.errors import SandboxInvalidRequest

# These tests are about ownership and sessions: token-less turns (a stage with require_turn_token
# false); the token itself is tested in tests/integration/dispatch/test_turn_token.py.
_TOKENLESS: dict[str, Any] = {"token": None, "required": False}


@pytest.fixture
def store(ddb: Any, tables: dict[str, str]) -> TurnStore:
    return TurnStore(table_name=tables[n.TURNS.logical], ddb=ddb)


def test_claim_creates_then_returns_same_owner(store: TurnStore) -> None:
    first = turn_logic.claim(store, "acme", "agent-1", "turn-1", **_TOKENLESS)
    again = turn_logic.claim(store, "acme", "agent-1", "turn-1", **_TOKENLESS)
    assert (first.tenant_id, again.tenant_id, again.agent_id) == ("acme", "acme", "agent-1")


def test_claim_by_other_agent_of_the_tenant_is_invalid(store: TurnStore) -> None:
    turn_logic.claim(store, "acme", "agent-1", "turn-1", **_TOKENLESS)
    with pytest.raises(SandboxInvalidRequest):
        turn_logic.claim(store, "acme", "agent-2", "turn-1", **_TOKENLESS)


def test_claim_same_turn_id_in_two_tenants_is_two_turns(store: TurnStore) -> None:
    # Given tenant A holds turn-123 with a live session
    held = turn_logic.claim(store, "acme", "agent-1", "turn-123", **_TOKENLESS)
    lease.acquire_session(
        store,
        held,
        owner="a",
        interpreter_id="ci-acme",
        start=lambda: "s-acme",
        stop_previous=lambda *_: None,
        max_session_age_seconds=600,
        wait_seconds=1,
    )
    # When tenant B uses the same turn id
    other = turn_logic.claim(store, "globex", "agent-1", "turn-123", **_TOKENLESS)
    # Then B gets its own fresh turn, and A's turn and session are untouched
    assert (other.tenant_id, other.session_id, other.live_session) == ("globex", None, False)
    assert store.get("acme", "turn-123").session_id == "s-acme"
    assert store.get("globex", "turn-123").tenant_id == "globex"


def test_claim_race_between_tenants_both_win(store: TurnStore) -> None:
    # Given two tenants claiming one fresh turn id at the same moment
    results: list[str] = []
    barrier = threading.Barrier(8)

    def claim(tenant: str) -> None:
        barrier.wait()
        results.append(turn_logic.claim(store, tenant, "agent", "turn-race", **_TOKENLESS).tenant_id)

    threads = [threading.Thread(target=claim, args=(t,)) for t in ["acme", "globex"] * 4]
    [t.start() for t in threads]
    [t.join() for t in threads]
    # Then every claim passes, each tenant on its own turn
    assert sorted(results) == ["acme"] * 4 + ["globex"] * 4


def test_claim_by_other_agent_of_tenant_reveals_nothing(store: TurnStore) -> None:
    # Given agent-1 holds a turn of acme
    turn_logic.claim(store, "acme", "agent-1", "turn-1", **_TOKENLESS)
    # When agent-2 of acme uses that turn id
    with pytest.raises(SandboxInvalidRequest) as refused:
        turn_logic.claim(store, "acme", "agent-2", "turn-1", **_TOKENLESS)
    # Then the refusal names neither the owner agent nor any state of the turn
    assert refused.value.message == messages.TURN_NOT_YOURS
    assert "agent-1" not in json.dumps(refused.value.to_response())


def test_acquire_session_concurrent_first_calls_start_one_session(store: TurnStore) -> None:
    # Given 8 concurrent first calls of one turn and a slow Start
    turn = turn_logic.claim(store, "acme", "agent", "turn-c", **_TOKENLESS)
    starts: list[str] = []
    lock = threading.Lock()

    def start() -> str:
        time.sleep(0.3)
        with lock:
            starts.append("s")
            return f"session-{len(starts)}"

    got: list[str] = []
    barrier = threading.Barrier(8)

    def call(i: int) -> None:
        barrier.wait()
        sid, _ = lease.acquire_session(
            store,
            turn,
            owner=f"inv-{i}",
            interpreter_id="ci",
            start=start,
            stop_previous=lambda *_: None,
            max_session_age_seconds=600,
            wait_seconds=10,
        )
        got.append(sid)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    # Then one Start, and every caller uses that one session
    assert len(starts) == 1
    assert got == ["session-1"] * 8
    assert store.get("acme", "turn-c").session_id == "session-1"


def test_acquire_session_failed_start_releases_lease(store: TurnStore) -> None:
    turn = turn_logic.claim(store, "acme", "agent", "turn-f", **_TOKENLESS)

    def boom() -> str:
        raise RuntimeError("start refused")

    with pytest.raises(RuntimeError):
        lease.acquire_session(
            store,
            turn,
            owner="a",
            interpreter_id="ci",
            start=boom,
            stop_previous=lambda *_: None,
            max_session_age_seconds=600,
            wait_seconds=1,
        )
    # the next caller can start at once (no wait for a dead lease)
    sid, started = lease.acquire_session(
        store,
        store.get("acme", "turn-f"),
        owner="b",
        interpreter_id="ci",
        start=lambda: "s2",
        stop_previous=lambda *_: None,
        max_session_age_seconds=600,
        wait_seconds=1,
    )
    assert (sid, started) == ("s2", True)


def test_acquire_session_replaces_too_old_session_and_stops_it(store: TurnStore) -> None:
    turn = turn_logic.claim(store, "acme", "agent", "turn-o", **_TOKENLESS)
    lease.acquire_session(
        store,
        turn,
        owner="a",
        interpreter_id="ci",
        start=lambda: "old",
        stop_previous=lambda *_: None,
        max_session_age_seconds=600,
        wait_seconds=1,
    )
    stopped: list[tuple[str, str]] = []
    later = TurnStore(table_name=store.table, ddb=store.ddb, clock=lambda: time.time() + 10_000)
    sid, started = lease.acquire_session(
        later,
        later.get("acme", "turn-o"),
        owner="b",
        interpreter_id="ci",
        start=lambda: "new",
        stop_previous=lambda i, s: stopped.append((i, s)),
        max_session_age_seconds=600,
        wait_seconds=1,
    )
    assert (sid, started, stopped) == ("new", True, [("ci", "old")])


def test_mark_stopped_only_for_current_session(store: TurnStore) -> None:
    turn = turn_logic.claim(store, "acme", "agent", "turn-s", **_TOKENLESS)
    lease.acquire_session(
        store,
        turn,
        owner="a",
        interpreter_id="ci",
        start=lambda: "s1",
        stop_previous=lambda *_: None,
        max_session_age_seconds=600,
        wait_seconds=1,
    )
    assert store.mark_stopped("acme", "turn-s", "other") is False
    assert store.mark_stopped("acme", "turn-s", "s1") is True
    assert store.mark_stopped("acme", "turn-s", "s1") is False
    assert store.get("acme", "turn-s").live_session is False


def test_acquire_session_lost_lease_stops_the_started_session(store: TurnStore) -> None:
    # Given a Start so slow that another caller took over the expired lease meanwhile
    turn = turn_logic.claim(store, "acme", "agent", "turn-l", **_TOKENLESS)
    stopped: list[tuple[str, str]] = []

    def slow_start() -> str:
        store.ddb.update_item(
            TableName=store.table,
            Key={"tenant_id": {"S": "acme"}, "turn_id": {"S": "turn-l"}},
            UpdateExpression="SET lease_owner = :other",
            ExpressionAttributeValues={":other": {"S": "someone-else"}},
        )
        return "orphan-candidate"

    # When the slow caller tries to record its session / Then it stops it and reports the failure
    with pytest.raises(TurnStoreUnavailable):
        lease.acquire_session(
            store,
            turn,
            owner="me",
            interpreter_id="ci",
            start=slow_start,
            stop_previous=lambda i, s: stopped.append((i, s)),
            max_session_age_seconds=600,
            wait_seconds=1,
        )
    assert stopped == [("ci", "orphan-candidate")]


def test_acquire_session_end_turn_during_start_stops_the_new_session(store: TurnStore) -> None:
    # Given end_turn arrives while the first call of the turn is starting its session
    turn = turn_logic.claim(store, "acme", "agent", "turn-e", **_TOKENLESS)
    stopped: list[tuple[str, str]] = []

    def start_while_turn_ends() -> str:
        store.end("acme", "turn-e")
        return "would-outlive-its-turn"

    # When the start completes / Then the session is stopped, not recorded, and the turn stays closed
    with pytest.raises(TurnStoreUnavailable):
        lease.acquire_session(
            store,
            turn,
            owner="me",
            interpreter_id="ci",
            start=start_while_turn_ends,
            stop_previous=lambda i, s: stopped.append((i, s)),
            max_session_age_seconds=600,
            wait_seconds=1,
        )
    assert stopped == [("ci", "would-outlive-its-turn")]
    assert store.get("acme", "turn-e").ended is True and store.get("acme", "turn-e").live_session is False
    with pytest.raises(SandboxInvalidRequest, match="ended"):
        turn_logic.refuse_if_ended(turn_logic.claim(store, "acme", "agent", "turn-e", **_TOKENLESS))
