"""Benchmark `files_in_overhead`: a warm `execute_code` THROUGH DISPATCH
with a 1 MiB inline input file ÷ the same call without it, on the local stack (dispatch
in-process with its CDK environment, moto in its own process as `sandboxctl local up` runs it,
the quota Lambda in the local Lambda emulator, the local interpreter), same turn, same session,
samples interleaved. Target: ratio ≤ 2.

What the file adds on dispatch's path: parsing its base64 (strict) and hashing it for the audit
row, one `writeFiles` call before the code, and the audit row's `input_files`.
"""

from __future__ import annotations

import base64
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_common import dimensions

from tests.benchmarks._moto import moto_in_own_process
from tests.benchmarks._report import emit
from tests.support import stack as harness
from tests.support.stack import Stack, event

pytestmark = pytest.mark.bench

interpreter = harness.interpreter
stack = harness.stack

REPO = Path(__file__).resolve().parents[2]
PAYLOAD = bytes(range(256)) * 4096  # 1 MiB, not UTF-8 text
CODE = "import os\nprint(os.path.getsize('data/in.bin') if os.path.exists('data/in.bin') else 0)"


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    """This module's moto: the local stack's serial moto server, in its own process."""
    with moto_in_own_process() as endpoint:
        yield endpoint


def test_files_in_overhead_through_dispatch(stack: Stack, bench_full: bool) -> None:
    rounds = 15 if bench_full else 2
    stack.set_cap(dimensions.AGENT_HOURLY.name, 100_000)  # the measured calls must not meet the hourly cap
    files = [{"path": "data/in.bin", "content_base64": base64.b64encode(PAYLOAD).decode()}]
    remove = "import os\nos.path.exists('data/in.bin') and os.remove('data/in.bin')"
    # Given a turn whose session is live and warm (Start + readiness done, connections open)
    assert stack.dispatch(event("begin_turn", turn_id="fio"))["sandbox"]["status"] == "ready"
    for i in range(2):
        assert stack.dispatch(event(turn_id="fio", call_id=f"warm-{i}", code=CODE, files=files))["ok"] is True
        assert stack.dispatch(event(turn_id="fio", call_id=f"warm-rm-{i}", code=remove))["ok"] is True

    # When the same call runs with and without the file, alternately (removing the file: untimed)
    with_file: list[float] = []
    without_file: list[float] = []
    outputs: dict[str, set[str]] = {"with": set(), "without": set()}
    for i in range(rounds):
        start = time.perf_counter()
        result = stack.dispatch(event(turn_id="fio", call_id=f"with-{i}", code=CODE, files=files))
        with_file.append(time.perf_counter() - start)
        outputs["with"].add(result["stdout"])
        assert stack.dispatch(event(turn_id="fio", call_id=f"rm-{i}", code=remove))["ok"] is True
        start = time.perf_counter()
        result = stack.dispatch(event(turn_id="fio", call_id=f"without-{i}", code=CODE))
        without_file.append(time.perf_counter() - start)
        outputs["without"].add(result["stdout"])
    ratio = statistics.median(with_file) / statistics.median(without_file)

    # Then the code saw the whole file in every call with it, and none without it
    assert len(with_file) == len(without_file) == rounds
    assert outputs == {"with": {f"{len(PAYLOAD)}\n"}, "without": {"0\n"}}
    emit(
        "files_in_overhead",
        target="ratio <= 2",
        ratio=ratio,
        input_bytes=len(PAYLOAD),
        rounds=rounds,
        with_file_ms=round(statistics.median(with_file) * 1000, 1),
        without_file_ms=round(statistics.median(without_file) * 1000, 1),
    )
    if bench_full:
        assert ratio <= 2
