"""The turn-guarded, once-per-call_id count, against the real moto server.

DynamoDB (API reference, CancellationReason): the reasons are "ordered according to the ordering
of the TransactWriteItems request parameter", and an item without error has a null code. The
quota Lambda's transaction is [turn ConditionCheck, marker Put, tenant daily, agent hourly]; the
tests below pin that moto answers the same way (each refusal is told apart by its position).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sandbox_common import aws, dimensions, limits, naming, settings
from sandbox_common.settings import QuotaSettings
from sandbox_common.turn_token import new_token, token_hash

from .conftest import STAGE

DAILY, HOURLY = "acme#2026-11-21", "acme#agent-7#2026-11-21T08"
TOKEN = new_token()


@pytest.fixture
def guarded(quota, monkeypatch, freeze):
    """The quota stack plus a turns table the Lambda's guard reads, and a clock in one window."""
    freeze("2026-11-21T08:15:00Z")
    turns = naming.TURNS.physical(STAGE)
    aws.client("dynamodb").create_table(
        TableName=turns,
        KeySchema=[
            {"AttributeName": naming.TURNS.pk, "KeyType": "HASH"},
            {"AttributeName": naming.TURNS.sort_key, "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": naming.TURNS.pk, "AttributeType": "S"},
            {"AttributeName": naming.TURNS.sort_key, "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    env = QuotaSettings(
        stage=STAGE,
        tenant_daily_table=naming.TENANT_DAILY_COUNTERS.physical(STAGE),
        agent_hourly_table=naming.AGENT_HOURLY_COUNTERS.physical(STAGE),
        turns_table=turns,
    ).to_env()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings.clear_caches()
    return quota


def put_turn(
    turn_id: str = "turn-1", *, agent: str = "agent-7", token_sha256: str | None = None, ended: bool = False
) -> None:
    item: dict[str, Any] = {
        naming.TURNS.pk: {"S": "acme"},
        naming.TURNS.sort_key: {"S": turn_id},
        naming.TURN_ATTR_AGENT: {"S": agent},
    }
    if token_sha256 is not None:
        item[naming.TURN_ATTR_TOKEN_HASH] = {"S": token_sha256}
    if ended:
        item[naming.TURN_ATTR_ENDED] = {"BOOL": True}
    aws.client("dynamodb").put_item(TableName=naming.TURNS.physical(STAGE), Item=item)


def guarded_call(
    stack,
    *,
    call_id: str = "call-1",
    token: str | None = TOKEN,
    turn_id: str = "turn-1",
    release: bool = False,
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "tenant_id": "acme",
        "agent_id": "agent-7",
        "counts": False,
        "call_id": call_id,
        "turn": {"turn_id": turn_id, "token_sha256": token_hash(token) if token else ""},
    }
    if release:
        event.pop("turn")
        event["release"] = True
    return stack.invoke(event)


def counts(stack) -> tuple[int | None, int | None]:
    return stack.count(naming.TENANT_DAILY_COUNTERS, DAILY), stack.count(naming.AGENT_HOURLY_COUNTERS, HOURLY)


def test_turn_guard_right_token_counts_once_and_writes_the_marker(guarded):
    # Given a turn bound to the token
    put_turn(token_sha256=token_hash(TOKEN))
    # When a guarded call with that token arrives
    answer = guarded_call(guarded)
    # Then it is admitted and counted once, and its marker is stored with the idempotency TTL
    assert answer == {"ok": True, "tenant_daily_count": None, "agent_hourly_count": None}
    assert counts(guarded) == (1, 1)
    marker = [
        i
        for i in guarded.items(naming.TENANT_DAILY_COUNTERS)
        if i[naming.TENANT_DAILY_COUNTERS.pk]["S"] == "counted#acme#call-1"
    ]
    assert len(marker) == 1
    assert marker[0][naming.QUOTA_MARKER_ATTR_DAILY_KEY]["S"] == DAILY
    assert marker[0][naming.QUOTA_MARKER_ATTR_HOURLY_KEY]["S"] == HOURLY


@pytest.mark.parametrize(
    ("turn", "token"),
    [
        pytest.param(dict(token_sha256=token_hash(TOKEN)), new_token(), id="wrong-token"),
        pytest.param(dict(token_sha256=token_hash(TOKEN)), None, id="missing-token"),
        pytest.param(dict(token_sha256=""), TOKEN, id="token-on-token-less-turn"),
        pytest.param(dict(token_sha256=token_hash(TOKEN), ended=True), TOKEN, id="ended-turn"),
        pytest.param(dict(token_sha256=token_hash(TOKEN), agent="agent-9"), TOKEN, id="other-agents-turn"),
    ],
)
def test_turn_guard_refusal_counts_nothing(guarded, turn, token):
    # Given a turn the call may not use
    put_turn(**turn)
    # When a guarded call arrives
    answer = guarded_call(guarded, token=token)
    # Then the guard refuses it (the turn exists), and nothing is counted nor marked
    assert answer == {"ok": False, "turn_refused": True, "turn_exists": True}
    assert counts(guarded) == (None, None)
    assert guarded.items(naming.TENANT_DAILY_COUNTERS) == []


def test_turn_guard_missing_turn_answers_turn_exists_false(guarded):
    # Given no turn item (a first call: dispatch creates it, then checks sequentially)
    # When a guarded call arrives / Then it is refused as "no such turn", nothing counted
    assert guarded_call(guarded) == {"ok": False, "turn_refused": True, "turn_exists": False}
    assert counts(guarded) == (None, None)


@pytest.mark.parametrize("stored", ["", None], ids=["empty-hash", "no-hash-attribute"])
def test_turn_guard_token_less_turn_admits_a_token_less_call(guarded, stored):
    # Given a token-less turn (stage without required tokens), with "" or without the attribute
    put_turn(token_sha256=stored)
    # When a guarded call without a token arrives / Then it is counted (turn_token.verify's rule)
    assert guarded_call(guarded, token=None)["ok"] is True
    assert counts(guarded) == (1, 1)


def test_turn_guard_same_call_id_twice_is_counted_once(guarded):
    # Given a call counted once
    put_turn(token_sha256=token_hash(TOKEN))
    assert "already_counted" not in guarded_call(guarded)
    # When its retry arrives / Then it proceeds as already counted and counts nothing
    again = guarded_call(guarded)
    assert again["ok"] is True and again["already_counted"] is True
    assert counts(guarded) == (1, 1)
    # And another call_id is counted
    assert "already_counted" not in guarded_call(guarded, call_id="call-2")
    assert counts(guarded) == (2, 2)


def test_turn_guard_racing_duplicates_are_counted_once(guarded):
    # Given one turn and a warm container
    put_turn(token_sha256=token_hash(TOKEN))
    guarded.call(tenant="warmup")
    callers = 8
    barrier = threading.Barrier(callers)

    def one(_: int) -> dict[str, Any]:
        barrier.wait()
        return guarded_call(guarded, call_id="dup")

    # When 8 copies of the same call_id race
    with ThreadPoolExecutor(max_workers=callers) as pool:
        answers = list(pool.map(one, range(callers)))
    # Then all proceed, exactly one counted it, and the counters hold 1
    assert len(answers) == callers and all(a["ok"] for a in answers)
    assert sum(not a.get("already_counted") for a in answers) == 1
    assert counts(guarded) == (1, 1)


def test_turn_guard_precedence_turn_refusal_before_already_counted(guarded):
    # Given a counted call, whose turn then ends
    put_turn(token_sha256=token_hash(TOKEN))
    guarded_call(guarded)
    put_turn(token_sha256=token_hash(TOKEN), ended=True)
    # When its retry arrives (both the turn check and the marker fail) / Then the turn refusal wins
    assert guarded_call(guarded)["turn_refused"] is True
    assert counts(guarded) == (1, 1)


def test_turn_guard_precedence_already_counted_before_cap(guarded):
    # Given a counted call that filled the hourly cap
    guarded.set_cap(dimensions.AGENT_HOURLY.name, 1)
    put_turn(token_sha256=token_hash(TOKEN))
    assert guarded_call(guarded)["ok"] is True
    # When its retry arrives (marker and cap both fail) / Then it proceeds as already counted
    assert guarded_call(guarded)["already_counted"] is True
    # And a new call is refused on the cap, with nothing counted
    refused = guarded_call(guarded, call_id="call-2")
    assert refused["ok"] is False and refused["dimension"] == dimensions.AGENT_HOURLY.name
    assert counts(guarded) == (1, 1)


def test_turn_guard_expired_marker_counts_again(guarded, monkeypatch):
    # Given a marker whose expiry has passed (TTL deletion is lazy: the item may still be there)
    put_turn(token_sha256=token_hash(TOKEN))
    guarded_call(guarded)
    import time as real_time

    from quota_check import logic

    later = real_time.time() + limits.QUOTA_MARKER_TTL_SECONDS + 10
    monkeypatch.setattr(logic.time, "time", lambda: later)
    from quota_check import counters

    monkeypatch.setattr(counters.time, "time", lambda: later)
    # When the same call_id arrives / Then it is a new count
    assert "already_counted" not in guarded_call(guarded)
    assert counts(guarded) == (2, 2)


def test_release_undoes_the_count_and_the_marker_once(guarded):
    # Given a counted call
    put_turn(token_sha256=token_hash(TOKEN))
    guarded_call(guarded)
    # When dispatch releases it (refused before running)
    first = guarded_call(guarded, release=True)
    # Then both counters go back and the marker is gone, so a retry counts again
    assert first["ok"] is True and first["released"] is True
    assert counts(guarded) == (0, 0)
    pks = [i[naming.TENANT_DAILY_COUNTERS.pk]["S"] for i in guarded.items(naming.TENANT_DAILY_COUNTERS)]
    assert pks == [DAILY]
    # And a second release undoes nothing
    assert guarded_call(guarded, release=True) == {
        "ok": True,
        "tenant_daily_count": None,
        "agent_hourly_count": None,
    }
    assert counts(guarded) == (0, 0)


def test_turn_guard_conflict_retry_is_reported(guarded, inject_error):
    # Given the first attempt conflicts with a concurrent transaction
    put_turn(token_sha256=token_hash(TOKEN))
    attempts: list[bytes] = []

    def first_only(body: bytes) -> bool:
        attempts.append(body)
        return len(attempts) == 1

    reasons = [{"Code": "None"}, {"Code": "None"}, {"Code": "TransactionConflict"}, {"Code": "None"}]
    injected = inject_error(
        "dynamodb",
        "TransactWriteItems",
        "TransactionCanceledException",
        extra={"CancellationReasons": reasons},
        when=first_only,
    )
    # When the call arrives
    answer = guarded_call(guarded)
    injected.remove()
    # Then it is admitted once and the retry is in the answer
    assert injected.sent == 1 and len(attempts) == 2
    assert answer["ok"] is True and answer["retries"] == 1
    assert counts(guarded) == (1, 1)


def test_marker_ttl_equals_idempotency_record_ttl():
    from dispatch.idempotency.store import RECORD_TTL_SECONDS

    assert limits.QUOTA_MARKER_TTL_SECONDS == RECORD_TTL_SECONDS
