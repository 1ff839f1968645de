"""Benchmark `call_walk`: the walk of one later execute_code through our modules (tests/support/walk.py):
the modules entered in order, the stops, and the returns to a module already left, over the call
path (dispatch, the shared run time, the request models). Target, read by package
(`dispatch.sessions`, `sandbox_runtime.runner`, ...): ≤ 30 stops, no package entered more than 4
times — the call is a line of stages, each package entered for its stage and left again as the
line unwinds, not a hub every capability calls back into. The walk by module and the walk over
every module of ours (the common layer's outcome, audit, errors, ... too) are reported beside it.

The call is a real one: dispatch in-process on the harness of tests/support/stack.py (moto, the
local interpreter, the quota Lambda in the emulator), its turn begun and its first call made
before the walk is traced, so the trace is the later call's alone.
"""

from __future__ import annotations

import pytest

from tests.benchmarks._report import emit
from tests.support.stack import Stack, event, interpreter, stack
from tests.support.walk import in_any_of_ours, in_call_path, traced

__all__ = ["interpreter", "stack"]

pytestmark = pytest.mark.bench

TARGET_STOPS, TARGET_ENTRIES = 30, 4  # by package: stops, and entries of any one package


def test_call_walk_of_a_later_execute_code(stack: Stack) -> None:
    # Given a turn whose session is live (begin_turn and a first call already answered)
    assert stack.dispatch(event("begin_turn"))["ok"] is True
    assert stack.dispatch(event(call_id="c1", code="x = 1"))["ok"] is True
    # When one later call is walked, over the call path and over every module of ours
    with traced(in_call_path) as walk:
        assert stack.dispatch(event(call_id="c2", code="x += 1"))["ok"] is True
    with traced(in_any_of_ours) as everything:
        assert stack.dispatch(event(call_id="c3", code="x += 1"))["ok"] is True
    # Then report the walks
    packages = walk.by_package()
    figure = packages.figure()
    entries = {package: packages.stops.count(package) for package in packages.modules}
    emit(
        "call_walk",
        target=(
            f"a later execute_code's call path by package: <= {TARGET_STOPS} stops, "
            f"no package entered more than {TARGET_ENTRIES} times"
        ),
        ratio=figure["stops"] / TARGET_STOPS,
        **figure,
        most_entered=max(entries.items(), key=lambda item: item[1]),
        by_module=walk.figure(),
        every_module_of_ours=everything.figure(),
    )
    # and the shape holds (it is the code's, not the machine's: no load moves it)
    assert walk.stops[0] == "dispatch.handler"
    assert figure["stops"] <= TARGET_STOPS, figure
    assert max(entries.values()) <= TARGET_ENTRIES, entries
