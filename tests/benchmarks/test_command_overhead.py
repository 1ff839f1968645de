"""Benchmark `command_overhead`: a warm bash `true` THROUGH DISPATCH ÷ a warm Python
`pass` through dispatch, on the local stack (dispatch in-process with its CDK environment, moto in
its own process as `sandboxctl local up` runs it, the quota Lambda in the local Lambda emulator, the
local interpreter), same turn, same session, samples interleaved. Target: ratio ≤ 1.3.

What a command adds on dispatch's path: the shell runtime's source travelling with the call (about
5 KB), loading it in the session, starting bash with the script on a pipe and relaying its output
through the session's redacted stdio.
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


def test_command_overhead_through_dispatch(stack: Stack, bench_full: bool) -> None:
    rounds = 15 if bench_full else 2
    stack.set_cap(dimensions.AGENT_HOURLY.name, 100_000)  # the measured calls must not meet the hourly cap
    # Given a turn whose session is live and warm (Start + readiness done, connections open)
    assert stack.dispatch(event("begin_turn", turn_id="cmd"))["sandbox"]["status"] == "ready"
    for i in range(2):
        assert stack.dispatch(event(turn_id="cmd", call_id=f"warm-py-{i}", code="pass"))["ok"] is True
        warm = event(turn_id="cmd", call_id=f"warm-sh-{i}", code="true", language="bash")
        assert stack.dispatch(warm)["ok"] is True

    # When bash `true` and Python `pass` run alternately
    bash: list[float] = []
    python: list[float] = []
    answers: list[dict[str, object]] = []
    for i in range(rounds):
        start = time.perf_counter()
        answers.append(stack.dispatch(event(turn_id="cmd", call_id=f"sh-{i}", code="true", language="bash")))
        bash.append(time.perf_counter() - start)
        start = time.perf_counter()
        answers.append(stack.dispatch(event(turn_id="cmd", call_id=f"py-{i}", code="pass")))
        python.append(time.perf_counter() - start)
    ratio = statistics.median(bash) / statistics.median(python)

    # Then every call succeeded with nothing written, and the ratio is reported
    assert len(bash) == len(python) == rounds
    assert {(a["ok"], a["stdout"], a["stderr"]) for a in answers} == {(True, "", "")}
    emit(
        "command_overhead",
        target="ratio <= 1.3",
        ratio=ratio,
        rounds=rounds,
        bash_ms=round(statistics.median(bash) * 1000, 1),
        python_ms=round(statistics.median(python) * 1000, 1),
    )
    if bench_full:
        assert ratio <= 1.3
