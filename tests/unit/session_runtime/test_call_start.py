"""Each call's driver in the session records when the call started (the artifact collector
returns what changed under outputs/ since then with the call, not with a background job): the
three runtimes name the same module as the host does."""

from __future__ import annotations

import base64
import sys
import time

from sandbox_common import naming as n
from sandbox_session import cell, node, shell, tools


def test_call_start_every_runtime_names_the_module_the_collector_reads() -> None:
    names = {runtime.CALL_START_MODULE for runtime in (cell, shell, tools, node)}
    assert names == {n.CALL_START_MODULE}


def test_call_start_a_cell_records_its_start_on_the_sessions_clock() -> None:
    # Given no call recorded yet, when a cell runs
    sys.modules.pop(n.CALL_START_MODULE, None)
    before = time.time_ns()
    assert cell.run(base64.b64encode(b"x = 1").decode(), None, {}) is None
    # Then its start is recorded, between the moments around it
    assert before <= sys.modules[n.CALL_START_MODULE].started_ns <= time.time_ns()
