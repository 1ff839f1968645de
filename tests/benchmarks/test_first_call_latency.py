"""Benchmark `first_call_latency`: the first execute_code of a turn with a warm session
÷ a later execute_code of a turn, measured side by side THROUGH DISPATCH on the local stack (the
shared harness: dispatch in-process, quota Lambda in the emulator, moto, the local interpreter).
The cold first call's ratio is printed too. Target: warm ratio ≤ 1.5 (a cold first call pays
Start + the readiness preamble; a warm one claims a session with one conditional write).

Each round: the reaper refills the pool (off the critical path: not timed), begin_turn (not
timed), then the turn's first call (warm), its second call (later), and a first call of another
turn with the pool empty (cold). Medians over the rounds.
"""

from __future__ import annotations

import statistics
import time

import pytest
from sandbox_common import naming as n

from tests.benchmarks._report import emit
from tests.integration.sessions.conftest import reaper_stack, set_warm
from tests.support import stack as harness
from tests.support.stack import Stack, event

pytestmark = pytest.mark.bench
interpreter = harness.interpreter
stack = harness.stack
__all__ = ["reaper_stack"]

TARGET = 1.5
CODE = "x = 1"


def _timed(stack: Stack, request: dict) -> tuple[float, dict]:
    started = time.perf_counter()
    answer = stack.dispatch(request)
    return time.perf_counter() - started, answer


def test_first_call_latency_warm_vs_later_call(reaper_stack: Stack, bench_full: bool) -> None:
    from reaper.service import reaper

    stack = reaper_stack
    rounds = 8 if bench_full else 1
    warm, later, cold = [], [], []
    # A warm dispatch container: its first-ever call builds clients and reads the caps
    assert stack.dispatch(event(turn_id="bench-warmup", call_id="wu", code=CODE))["ok"] is True
    stack.dispatch(event("end_turn", turn_id="bench-warmup"))
    for i in range(rounds):
        set_warm("acme", "default-public", 1)
        assert reaper().run()["refill"]["started"] == 1  # not timed: off the critical path
        set_warm("acme", "default-public", 0)
        for turn in (f"bench-w{i}", f"bench-c{i}"):
            assert stack.dispatch(event("begin_turn", turn_id=turn))["ok"] is True
        seconds, answer = _timed(stack, event(turn_id=f"bench-w{i}", call_id=f"w{i}-1", code=CODE))
        assert answer["ok"] is True and answer[n.FIELD_SESSION_SOURCE] == "warm"
        warm.append(seconds)
        seconds, answer = _timed(stack, event(turn_id=f"bench-w{i}", call_id=f"w{i}-2", code=CODE))
        assert answer["ok"] is True and n.FIELD_SESSION_SOURCE not in answer
        later.append(seconds)
        seconds, answer = _timed(stack, event(turn_id=f"bench-c{i}", call_id=f"c{i}-1", code=CODE))
        assert answer["ok"] is True and answer[n.FIELD_SESSION_SOURCE] == "cold"
        cold.append(seconds)
        for turn in (f"bench-w{i}", f"bench-c{i}"):
            assert stack.dispatch(event("end_turn", turn_id=turn))["stopped"] is True
    assert len(warm) == len(later) == len(cold) == rounds
    warm_s, later_s, cold_s = (statistics.median(x) for x in (warm, later, cold))
    record = emit(
        "first_call_latency",
        target=f"warm first call / later call <= {TARGET} (through dispatch)",
        ratio=warm_s / later_s,
        cold_ratio=round(cold_s / later_s, 2),
        warm_first_ms=round(warm_s * 1000, 1),
        later_call_ms=round(later_s * 1000, 1),
        cold_first_ms=round(cold_s * 1000, 1),
        rounds=rounds,
        scope="dispatch handler in-process on the local stack (quota Lambda, moto, local interpreter)",
    )
    assert record["ratio"] is not None
    if bench_full:
        assert warm_s / later_s <= TARGET
