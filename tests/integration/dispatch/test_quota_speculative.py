"""The quota check sent at t=0 through the real dispatch flow: moto, the local
interpreter, the quota Lambda in the local Lambda emulator.

A spy wraps the dispatcher's quota callable (the real `check_quota`, passed through) only to see
which checks went out: speculative (turn-guarded), sequential, release.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sandbox_common import aws, dimensions
from sandbox_common import naming as n

from .conftest import Stack, event


class QuotaSpy:
    def __init__(self, real: Any) -> None:
        self.real = real
        self.sent: list[dict[str, Any]] = []
        self.answers: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        answer = self.real(*args, **kwargs)
        with self._lock:
            self.sent.append(kwargs)
            self.answers.append(answer)
        return answer

    def kinds(self) -> list[str]:
        return [
            "release" if k.get("release") else "guarded" if k.get("turn") else "sequential" for k in self.sent
        ]


@pytest.fixture
def spy(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> QuotaSpy:
    from dispatch import parts as dependencies

    dispatcher = dependencies.built()
    watcher = QuotaSpy(dispatcher.quota)
    monkeypatch.setattr(dispatcher, "quota", watcher)
    return watcher


def _daily(stack: Stack) -> int:
    return sum(
        int(i[n.COUNTER_ATTR_COUNT]["N"]) for i in stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical]
    )


def test_quota_speculative_later_call_is_one_guarded_check(stack: Stack, spy: QuotaSpy) -> None:
    # Given a container that has read the pre-flight (a first call of another turn, counted by
    # the sequential check: nothing is sent ahead before the pre-flight is cached)
    assert stack.dispatch(event(call_id="c0", turn_id="turn-0", code="print(0)"))["ok"] is True
    assert spy.kinds() == ["sequential"]
    # When turn-1's first call arrives (no turn item yet)
    assert stack.dispatch(event(call_id="c1", code="x = 1"))["ok"] is True
    # Then its guarded check went out at t=0 and the call was counted once: either the guard found
    # no turn yet and the sequential check counted it once the turn existed, or (the two raced)
    # the turn this call created with its token was already there when the guarded transaction ran
    first = spy.kinds()[1:]
    assert first in (["guarded", "sequential"], ["guarded"]), first
    if first == ["guarded", "sequential"]:
        assert spy.answers[1].turn_refused and spy.answers[1].turn_exists is False
        assert spy.answers[2].counted_here
    else:
        assert spy.answers[1].counted_here
    del spy.sent[:], spy.answers[:]
    # When a later call arrives
    later = stack.dispatch(event(call_id="c2", code="x += 1; print(x)"))
    # Then it made exactly one quota check, turn-guarded and keyed by its call_id, and counted once
    assert later["ok"] is True and later["stdout"] == "2\n"
    assert spy.kinds() == ["guarded"] and spy.sent[0]["call_id"] == "c2" and spy.answers[0].counted_here
    assert _daily(stack) == 3
    assert stack.markers() == ["acme#c0", "acme#c1", "acme#c2"]


@pytest.mark.parametrize("token", ["A" * 43, "other"], ids=["wrong", "another-turns"])
def test_quota_speculative_wrong_token_counts_nothing(stack: Stack, spy: QuotaSpy, token: str) -> None:
    from tests.support.stack import turn_token_for

    bad = "A" * 43 if token == "A" * 43 else turn_token_for("acme", "turn-2")
    # Given a turn with its session and a cached pre-flight
    assert stack.dispatch(event(call_id="c1", code="print(1)"))["ok"] is True
    counters, spy_before = stack.counter_items(), len(spy.sent)
    # When a later call carries a well-formed but wrong token
    answer = stack.dispatch(event(call_id="c-bad", code="print(2)", turn_token=bad))
    # Then the speculative check went out and its turn guard refused it: nothing counted, no
    # marker, no release needed, and the agent hears the token refusal
    assert answer["error"] == "SandboxInvalidRequest"
    assert spy.kinds()[spy_before:] == ["guarded"] and spy.answers[-1].turn_refused
    assert spy.answers[-1].turn_exists is True
    assert stack.counter_items() == counters
    assert "acme#c-bad" not in stack.markers()


def test_quota_speculative_duplicate_call_ids_racing_count_once(stack: Stack, spy: QuotaSpy) -> None:
    # Given a turn with its session
    assert stack.dispatch(event(call_id="c1", code="print(1)"))["ok"] is True
    before = _daily(stack)
    barrier = threading.Barrier(4)

    def one(_: int) -> dict[str, Any]:
        barrier.wait()
        return stack.dispatch(event(call_id="dup", code="import time; time.sleep(0.5); print('ran')"))

    # When four copies of the same call race
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(one, range(4)))
    # Then the call ran once, is counted once, has one audit row, and every copy's quota check
    # went out at t=0: one counted, the others were told it was already counted
    assert len(answers) == 4 and any(a.get("stdout") == "ran\n" for a in answers), answers
    assert _daily(stack) == before + 1
    assert [r["call_id"] for r in stack.audit_rows()].count("dup") == 1
    dup = [
        a for k, a in zip(spy.sent, spy.answers, strict=True) if k.get("call_id") == "dup" and k.get("turn")
    ]
    assert len(dup) == 4
    assert sum(a.counted_here for a in dup) == 1
    assert not [k for k in spy.sent if k.get("release")]


def test_quota_speculative_retry_of_a_finished_call_counts_nothing(stack: Stack, spy: QuotaSpy) -> None:
    # Given a later call that ran
    assert stack.dispatch(event(call_id="c1", code="print(1)"))["ok"] is True
    first = stack.dispatch(event(call_id="c2", code="print(2)"))
    counted = _daily(stack)
    # When its retry arrives (a replayed answer)
    again = stack.dispatch(event(call_id="c2", code="print(2)"))
    # Then the answer is the stored one and the speculative check was "already counted"
    assert again == first
    assert spy.answers[-1].already_counted is True
    assert _daily(stack) == counted


def test_quota_speculative_count_of_a_call_refused_after_it_is_released(stack: Stack) -> None:
    from dispatch import parts as dependencies

    # Given global_sessions at 0 (the session-cap kill switch) in a fresh container whose
    # pre-flight is cached (by a first call of another turn, refused on the cap)
    aws.client("ssm").put_parameter(
        Name=dimensions.parameter("local", dimensions.GLOBAL_SESSIONS.name),
        Value="0",
        Type="String",
        Overwrite=True,
    )
    dependencies.reset()
    dispatcher = dependencies.built()
    spy = QuotaSpy(dispatcher.quota)
    dispatcher.quota = spy
    assert (
        stack.dispatch(event(call_id="c0", turn_id="turn-0", code="print(0)"))["dimension"]
        == dimensions.GLOBAL_SESSIONS.name
    )
    # And turn-1 begun (its turn exists, so the guard holds) with no session yet
    assert stack.dispatch(event("begin_turn"))["ok"] is True
    before = _daily(stack)
    # When the turn's first call arrives
    refused = stack.dispatch(event(call_id="c1", code="print(1)"))
    # Then it is refused on the session cap (a refusal that counts nothing): the
    # speculative count went out, counted, and was released — counters and markers as before
    assert (refused["error"], refused["dimension"]) == (
        "SandboxCapExceeded",
        dimensions.GLOBAL_SESSIONS.name,
    ), refused
    assert spy.kinds() == ["guarded", "release"], spy.sent
    assert spy.answers[0].counted_here and spy.answers[1].released is True
    assert _daily(stack) == before == 0
    assert stack.markers() == []
