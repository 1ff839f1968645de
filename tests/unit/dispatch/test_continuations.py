"""Continuations of paused tool calls (docs/tool-calling.md) on moto's DynamoDB: single-use, bound to tenant,
agent and turn, claimed by one conditional write; hashes only."""

from __future__ import annotations

import threading
import time
import zlib
from typing import Any

import pytest
from dispatch.tools.store import Answered, ContinuationStore, token_hash
from sandbox_common import naming as n
from sandbox_common.errors import SandboxError, SandboxInvalidRequest, StillRunning
from sandbox_runtime.runner.stream import BoundedText
from sandbox_runtime.runner.tool_calling import PendingCall, ToolCallState, ToolRecord

OWNER = {"tenant_id": "acme", "agent_id": "agent-7", "turn_id": "turn-1"}
UNTIL = time.time() + 3600  # the claiming resume's deadline: not reached in these tests
CALL = {"call_id": "call-1", "invocation_id": "inv-1", "template_id": "analyst", "code_sha256": "ab" * 32}


def _state(stdout: bytes = b"rows so far\n") -> ToolCallState:
    return ToolCallState(
        interpreter_id="sbx_test_acme_pub",
        session_id="sess-1",
        call_ref="inv-1",
        allow=("query_sales",),
        running_ms=120,
        records=(ToolRecord("query_sales", "cd" * 32, 35, True),),
        pending=PendingCall(2, "query_sales", "ef" * 32, 1_700_000_000_000),
        stdout=BoundedText.restore(stdout, stdout.decode(), len(stdout), 1 << 20),
        stderr=BoundedText.restore(b"", "", 0, 1 << 16),
    )


@pytest.fixture
def store(tables: dict[str, str]) -> ContinuationStore:
    return ContinuationStore(tables[n.CONTINUATIONS.logical])


def _issue(store: ContinuationStore, **owner: Any) -> str:
    return store.issue(**{**OWNER, **owner}, call=CALL, state=_state(), wait_seconds=300)


def test_continuation_claim_by_its_owner_returns_the_stored_state(store: ContinuationStore) -> None:
    # Given an issued continuation
    token = _issue(store)

    # When its owner claims it
    claimed = store.claim(token, **OWNER, until=UNTIL)

    # Then the call context and the whole runner state come back
    assert claimed.call == CALL
    assert claimed.state.to_dict() == _state().to_dict()
    assert claimed.state.stdout.head == "rows so far\n"


def test_continuation_reused_while_its_resume_runs_is_answered_still_running(
    store: ContinuationStore,
) -> None:
    # Given a continuation claimed once, its resume under way
    token = _issue(store)
    store.claim(token, **OWNER, until=time.time() + 30)

    # When it is claimed again
    with pytest.raises(StillRunning) as running:
        store.claim(token, **OWNER, until=UNTIL)

    # Then it is answered "in progress", with the time to the first resume's deadline
    assert 1 <= running.value.retry_after_s <= 10


def test_continuation_reused_after_its_resume_died_is_taken_as_interrupted(store: ContinuationStore) -> None:
    # Given a continuation whose resume died: its claim's deadline has passed
    token = _issue(store)
    store.claim(token, **OWNER, until=time.time() - 1)

    # When it is claimed again, twice
    taken = store.claim(token, **OWNER, until=UNTIL)

    # Then the first retry takes it as interrupted (its call is to end with its row), once
    assert taken.interrupted and taken.state.session_id == "sess-1"
    with pytest.raises(SandboxInvalidRequest):
        store.claim(token, **OWNER, until=UNTIL)
    assert store.expire_due(now=time.time() + 3600) == []


def test_continuation_settled_with_an_answer_replays_it_to_its_owner_only(store: ContinuationStore) -> None:
    # Given a claimed continuation whose call ended with an answer
    token = _issue(store)
    claimed = store.claim(token, **OWNER, until=UNTIL)
    assert store.settle(claimed, {"ok": True, "stdout": "done\n"}) is True

    # When its owner, and another turn, present it again
    with pytest.raises(Answered) as answered:
        store.claim(token, **OWNER, until=UNTIL)
    with pytest.raises(SandboxInvalidRequest):
        store.claim(token, **{**OWNER, "turn_id": "turn-2"}, until=UNTIL)

    # Then the owner gets the stored answer; the sweep has nothing left to end
    assert answered.value.response == {"ok": True, "stdout": "done\n"}
    assert store.expire_due(now=time.time() + 3600) == []


def test_continuation_claim_of_a_dead_resume_is_swept_once_and_its_late_settle_loses(
    store: ContinuationStore,
) -> None:
    # Given a claim whose resume died, and a paused call not yet due
    token = _issue(store)
    dead = store.claim(token, **OWNER, until=time.time() - 1)
    _issue(store)

    # When the sweep runs (twice)
    swept = store.expire_due(now=time.time())
    again = store.expire_due(now=time.time())

    # Then the dead resume's call was taken as interrupted once; the dead resume can't settle it
    assert [c.interrupted for c in swept] == [True] and again == []
    assert store.settle(dead, {"ok": True}) is False


@pytest.mark.parametrize("other", [{"turn_id": "turn-2"}, {"agent_id": "agent-8"}, {"tenant_id": "globex"}])
def test_continuation_foreign_claim_is_refused_and_consumes_nothing(
    store: ContinuationStore, other: dict[str, str]
) -> None:
    # Given a continuation of acme/agent-7/turn-1
    token = _issue(store)

    # When another turn, agent or tenant presents it
    with pytest.raises(SandboxInvalidRequest):
        store.claim(token, **{**OWNER, **other}, until=UNTIL)

    # Then it was not consumed: the owner can still claim it
    assert store.claim(token, **OWNER, until=UNTIL).state.session_id == "sess-1"


@pytest.mark.parametrize("token", ["", "short", "x" * 43 + "!", None, 42, "A" * 44])
def test_continuation_malformed_token_is_refused_without_a_store_call(
    store: ContinuationStore, token: Any
) -> None:
    # Given a store whose client would fail if called
    store._client = object()

    # When / Then a malformed token is refused before any AWS call
    with pytest.raises(SandboxInvalidRequest):
        store.claim(token, **OWNER, until=UNTIL)


def test_continuation_unknown_token_is_refused(store: ContinuationStore) -> None:
    # Given / When a well-formed token that was never issued
    with pytest.raises(SandboxInvalidRequest):
        store.claim("A" * 43, **OWNER, until=UNTIL)


def test_continuation_concurrent_claims_exactly_one_wins(store: ContinuationStore) -> None:
    # Given one continuation and 6 concurrent resumes of it
    token = _issue(store)
    wins: list[str] = []
    refusals: list[str] = []

    def claim() -> None:
        try:
            store.claim(token, **OWNER, until=UNTIL)
            wins.append("won")
        except StillRunning:
            refusals.append("in progress")

    threads = [threading.Thread(target=claim) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # Then exactly one won
    assert len(wins) == 1
    assert len(refusals) == 5


def test_continuation_stores_only_the_token_hash_and_no_tool_data(store: ContinuationStore, ddb: Any) -> None:
    # Given an issued continuation
    token = _issue(store)

    # When the table is read raw
    items = ddb.scan(TableName=store.table_name)["Items"]

    # Then the key is the token's hash, the token appears nowhere, the state holds hashes only
    assert len(items) == 1
    item = items[0]
    assert item[n.CONTINUATIONS.pk]["S"] == token_hash(token)
    blob = repr(item) + zlib.decompress(bytes(item["state"]["B"])).decode()
    assert token not in blob
    assert "ef" * 32 in blob  # the pending call's input hash
    assert item[n.CONTINUATIONS.ttl]["N"].isdigit()


def test_continuation_expire_for_turn_claims_only_that_turns_paused_calls(store: ContinuationStore) -> None:
    # Given paused calls in turn-1 (one already resumed) and one in turn-2
    resumed = _issue(store)
    store.claim(resumed, **OWNER, until=UNTIL)
    paused = _issue(store)
    other_turn = _issue(store, turn_id="turn-2")

    # When turn-1's paused calls are expired
    expired = store.expire_for_turn(tenant_id="acme", turn_id="turn-1")

    # Then exactly the paused one of turn-1 was taken; it can no longer be resumed
    assert [c.turn_id for c in expired] == ["turn-1"]
    with pytest.raises(SandboxInvalidRequest):
        store.claim(paused, **OWNER, until=UNTIL)
    assert store.claim(other_turn, **{**OWNER, "turn_id": "turn-2"}, until=UNTIL).turn_id == "turn-2"


def test_continuation_store_failure_fails_closed(moto_endpoint: str) -> None:
    # Given a store whose table does not exist
    store = ContinuationStore("no-such-table")

    # When / Then issuing and claiming fail closed with a SandboxError naming the cause
    with pytest.raises(SandboxError) as issued:
        store.issue(**OWNER, call=CALL, state=_state(), wait_seconds=300)
    assert issued.value.fields["failure_reason"] == "continuation_store:ResourceNotFoundException"
    with pytest.raises(SandboxError):
        store.claim("A" * 43, **OWNER, until=UNTIL)
