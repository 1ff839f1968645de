"""Benchmark `js_call_overhead`: a warm JavaScript `console.log(1)` THROUGH DISPATCH ÷ a warm Python
`print(1)` through dispatch, on the local stack (dispatch in-process with its CDK environment, moto
in its own process as `sandboxctl local up` runs it, the quota Lambda in the local Lambda emulator,
the local interpreter under bubblewrap), same turn, same session, samples interleaved. Target:
ratio ≤ 1.5.

What a JavaScript call adds on dispatch's path: the Node.js runner and shell runtime travelling
with the call (loaded once per session while unchanged), starting a fresh Node.js process with the
program on a pipe, and relaying its output through the session's redacted stdio.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator

import pytest
from sandbox_common import dimensions

from tests.benchmarks._moto import moto_in_own_process
from tests.benchmarks._report import emit
from tests.support import stack as harness
from tests.support.stack import Stack, event

pytestmark = pytest.mark.bench

interpreter = harness.interpreter
stack = harness.stack


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    """This module's moto: the local stack's serial moto server, in its own process."""
    with moto_in_own_process() as endpoint:
        yield endpoint


def test_js_call_overhead_through_dispatch(stack: Stack, bench_full: bool) -> None:
    rounds = 15 if bench_full else 2
    stack.set_cap(dimensions.AGENT_HOURLY.name, 100_000)  # the measured calls must not meet the hourly cap
    # Given a turn whose session is live and warm (Start + readiness done, both runtimes loaded)
    assert stack.dispatch(event("begin_turn", turn_id="js"))["sandbox"]["status"] == "ready"
    for i in range(2):
        assert stack.dispatch(event(turn_id="js", call_id=f"warm-py-{i}", code="print(1)"))["ok"] is True
        warm = event(turn_id="js", call_id=f"warm-js-{i}", code="console.log(1)", language="javascript")
        assert stack.dispatch(warm)["ok"] is True

    # When JavaScript `console.log(1)` and Python `print(1)` run alternately
    javascript: list[float] = []
    python: list[float] = []
    answers: list[dict[str, object]] = []
    for i in range(rounds):
        call = event(turn_id="js", call_id=f"js-{i}", code="console.log(1)", language="javascript")
        start = time.perf_counter()
        answers.append(stack.dispatch(call))
        javascript.append(time.perf_counter() - start)
        start = time.perf_counter()
        answers.append(stack.dispatch(event(turn_id="js", call_id=f"py-{i}", code="print(1)")))
        python.append(time.perf_counter() - start)
    ratio = statistics.median(javascript) / statistics.median(python)

    # Then every call printed 1 in the one session, and the ratio is reported
    assert len(javascript) == len(python) == rounds
    assert {(a["ok"], a["stdout"], a["stderr"]) for a in answers} == {(True, "1\n", "")}
    assert len({a["session_id"] for a in answers}) == 1
    emit(
        "js_call_overhead",
        target="ratio <= 1.5",
        ratio=ratio,
        rounds=rounds,
        javascript_ms=round(statistics.median(javascript) * 1000, 1),
        python_ms=round(statistics.median(python) * 1000, 1),
    )
    if bench_full:
        assert ratio <= 1.5
