"""The turn token through the real dispatch flow (moto, local interpreter, quota Lambda).

Every refused action: SandboxInvalidRequest, nothing counted (counter items unchanged), no audit
row, no session started, and the SandboxTurnTokenRejected metric.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from sandbox_common import aws, messages
from sandbox_common import naming as n

from tests.support.stack import turn_token_for

from .conftest import Stack, event

TOKEN = turn_token_for("acme", "turn-1")
OTHER_TURNS_TOKEN = turn_token_for("acme", "turn-2")


def _turn_item(stack: Stack, turn_id: str, tenant_id: str = "acme") -> dict[str, Any]:
    out = aws.client("dynamodb").get_item(
        TableName=stack.resources.tables[n.TURNS.logical],
        Key={n.TURNS.pk: {"S": tenant_id}, n.TURNS.sort_key: {"S": turn_id}},
        ConsistentRead=True,
    )
    return dict(out.get("Item", {}))


def _assert_refused(
    stack: Stack,
    answer: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    counters_before: dict[str, Any],
    sessions_before: list[str],
) -> None:
    assert answer["ok"] is False and answer["error"] == "SandboxInvalidRequest", answer
    assert answer["error_message"] == messages.TURN_TOKEN_REJECTED
    assert stack.counter_items() == counters_before
    assert all(r["call_id"] != "c-refused" for r in stack.audit_rows())
    assert stack.live_sessions() == sessions_before
    assert n.METRIC_TURN_TOKEN_REJECTED in capsys.readouterr().out


def _set_required(stack: Stack, monkeypatch: pytest.MonkeyPatch, required: bool) -> None:
    from dispatch import parts as dependencies
    from sandbox_common import settings

    monkeypatch.setenv(n.ENV_REQUIRE_TURN_TOKEN, "true" if required else "false")
    settings.clear_caches()
    dependencies.reset()


@pytest.mark.parametrize(
    "token",
    [None, "short", "!" * 43, "A" * 43, OTHER_TURNS_TOKEN],
    ids=["missing", "malformed-short", "malformed-chars", "wrong", "another-turns"],
)
def test_turn_token_bad_token_on_a_bound_turn_is_refused_with_nothing_counted(
    stack: Stack, capsys: pytest.CaptureFixture[str], token: str | None
) -> None:
    # Given turn-1 bound to its token by a first call (which ran and was counted once)
    first = stack.dispatch(event(call_id="c1", code="print(1)"))
    assert first["ok"] is True, first
    counters, sessions, rows = stack.counter_items(), stack.live_sessions(), stack.audit_rows()
    assert len(rows) == 1 and first["session_id"] in sessions
    capsys.readouterr()
    # When a call of that turn carries a missing / malformed / wrong / another turn's token
    answer = stack.dispatch(event(call_id="c-refused", code="print(2)", turn_token=token))
    # Then it is refused: nothing counted, no audit row, no session touched, the metric emitted
    _assert_refused(stack, answer, capsys, counters, sessions)
    assert stack.audit_rows() == rows
    # And begin_turn / end_turn with that token are refused too, and the session keeps running
    assert stack.dispatch(event("begin_turn", turn_token=token))["error"] == "SandboxInvalidRequest"
    assert stack.dispatch(event("end_turn", turn_token=token))["error"] == "SandboxInvalidRequest"
    assert stack.live_sessions() == sessions
    # And the right token still works on the same session
    again = stack.dispatch(event(call_id="c2", code="print(3)"))
    assert again["ok"] is True and again["session_id"] == first["session_id"]


@pytest.mark.parametrize(
    "token", [None, "short", "!" * 43], ids=["missing", "malformed-short", "malformed-chars"]
)
def test_turn_token_bad_token_on_first_call_creates_nothing(
    stack: Stack, capsys: pytest.CaptureFixture[str], token: str | None
) -> None:
    # Given a stage that requires turn tokens and a fresh turn
    counters, sessions = stack.counter_items(), stack.live_sessions()
    # When its first call carries no token or a malformed one
    answer = stack.dispatch(event(call_id="c-refused", turn_token=token))
    # Then it is refused, nothing counted or started, and no turn item is created (nothing bound)
    _assert_refused(stack, answer, capsys, counters, sessions)
    assert stack.audit_rows() == []
    assert _turn_item(stack, "turn-1") == {}


def test_turn_token_only_its_hash_is_stored_in_the_turn_item(stack: Stack) -> None:
    # Given a turn begun with its token
    assert stack.dispatch(event("begin_turn"))["ok"] is True
    # When the turn item is read from the table
    item = _turn_item(stack, "turn-1")
    # Then it holds the token's SHA-256 and nowhere the token itself
    assert item[n.TURN_ATTR_TOKEN_HASH] == {"S": hashlib.sha256(TOKEN.encode()).hexdigest()}
    assert TOKEN not in repr(item)


def test_turn_token_retry_with_same_token_is_idempotent(stack: Stack) -> None:
    # Given a call that ran
    first = stack.dispatch(event(call_id="c1", code="print('once')"))
    assert first["ok"] is True
    # When it is retried with the same call_id and the same token
    retry = stack.dispatch(event(call_id="c1", code="print('once')"))
    # Then the stored answer comes back: counted once, one audit row
    assert retry["invocation_id"] == first["invocation_id"] and retry["stdout"] == "once\n"
    assert len(stack.audit_rows()) == 1


def test_turn_token_wrong_token_retry_of_finished_call_is_refused_not_replayed(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a finished call c1 whose answer sits in the idempotency store
    first = stack.dispatch(event(call_id="c1", code="print('secret result')"))
    assert first["ok"] is True
    counters, sessions = stack.counter_items(), stack.live_sessions()
    capsys.readouterr()
    # When someone retries c1 with a wrong token
    answer = stack.dispatch(event(call_id="c1", code="print('secret result')", turn_token="B" * 43))
    # Then it is refused, and the stored answer is not handed out
    _assert_refused(stack, answer, capsys, counters, sessions)
    assert "stdout" not in answer and first["invocation_id"] not in repr(answer)
    assert len(stack.audit_rows()) == 1


def test_turn_token_end_turn_of_unknown_turn_answers_not_stopped(stack: Stack) -> None:
    # Given no such turn / When end_turn arrives / Then the answer is the same as without a token
    assert stack.dispatch(event("end_turn", turn_id="turn-never")) == {"ok": True, "stopped": False}


def test_turn_token_end_turn_with_the_token_stops_the_session(stack: Stack) -> None:
    first = stack.dispatch(event(call_id="c1"))
    assert first["ok"] is True and first["session_id"] in stack.live_sessions()
    assert stack.dispatch(event("end_turn")) == {"ok": True, "stopped": True}
    assert first["session_id"] not in stack.live_sessions()


def test_turn_token_not_required_keeps_tokenless_turn_tokenless(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a stage with require_turn_token false and a turn whose first call had no token
    _set_required(stack, monkeypatch, False)
    first = stack.dispatch(event(call_id="c1", code="print(1)", turn_token=None))
    assert first["ok"] is True, first
    # Then the turn is stored token-less
    assert _turn_item(stack, "turn-1")[n.TURN_ATTR_TOKEN_HASH] == {"S": ""}
    # And later token-less calls work on the same session
    second = stack.dispatch(event(call_id="c2", code="print(2)", turn_token=None))
    assert second["ok"] is True and second["session_id"] == first["session_id"]
    counters, sessions = stack.counter_items(), stack.live_sessions()
    capsys.readouterr()
    # When a later call brings a token (someone trying to take the turn over)
    answer = stack.dispatch(event(call_id="c-refused", code="print(3)"))
    # Then it is refused, nothing counted
    _assert_refused(stack, answer, capsys, counters, sessions)
    assert len(stack.audit_rows()) == 2
    # And once the stage requires tokens again, the token-less turn is refused like any call without one
    _set_required(stack, monkeypatch, True)
    again = stack.dispatch(event(call_id="c-refused", code="print(4)", turn_token=None))
    _assert_refused(stack, again, capsys, counters, sessions)


def test_turn_token_not_required_still_binds_a_turn_begun_with_a_token(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a stage with require_turn_token false and a turn begun with a token
    _set_required(stack, monkeypatch, False)
    assert stack.dispatch(event("begin_turn"))["ok"] is True
    counters, sessions = stack.counter_items(), stack.live_sessions()
    capsys.readouterr()
    # When a call of it has no token / Then it is refused
    answer = stack.dispatch(event(call_id="c-refused", turn_token=None))
    _assert_refused(stack, answer, capsys, counters, sessions)
    assert stack.audit_rows() == []


def test_turn_token_item_without_the_attribute_counts_as_tokenless(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a turn item without a token hash attribute (written by a dispatch without turn tokens)
    aws.client("dynamodb").put_item(
        TableName=stack.resources.tables[n.TURNS.logical],
        Item={
            "turn_id": {"S": "turn-1"},
            "tenant_id": {"S": "acme"},
            "agent_id": {"S": "agent-7"},
            "created_at": {"N": "1"},
            "expires_at": {"N": "9999999999"},
        },
    )
    counters, sessions = stack.counter_items(), stack.live_sessions()
    capsys.readouterr()
    # When a call with a token arrives on a stage that requires tokens
    answer = stack.dispatch(event(call_id="c-refused"))
    # Then it is refused (the turn is token-less: nobody can bind it now), nothing counted
    _assert_refused(stack, answer, capsys, counters, sessions)
    assert stack.audit_rows() == []
