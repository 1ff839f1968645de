"""The route table's cold-start promise: a container that never sees a background job's submit,
get_job or cancel_job never loads dispatch's jobs package — not through the handler, and not
through the lines and capabilities every other action loads (end_turn, a resume and the sweep read
a turn's running jobs through the shared run time's job end instead)."""

from __future__ import annotations

import subprocess
import sys

# What the handler and every action but the jobs' ones import when they run.
OTHER_ACTIONS = (
    "dispatch.handler",
    "dispatch.routes",
    "dispatch.line",
    "dispatch.turns.actions",
    "dispatch.files.access",
    "dispatch.tools.flow",
    "dispatch.idempotency.stage",
    "dispatch.parts",
)
PROBE = """
import importlib, sys
for name in {modules!r}:
    importlib.import_module(name)
print(",".join(sorted(m for m in sys.modules if m == "dispatch.jobs" or m.startswith("dispatch.jobs."))))
"""


def _loaded_after(modules: tuple[str, ...], then: str = "") -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(modules=modules) + then],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [m for m in done.stdout.splitlines()[0].split(",") if m]


def test_no_action_but_the_jobs_loads_the_jobs_package() -> None:
    # Given a fresh interpreter / When the handler and every other action's modules are imported
    # Then the jobs package is not loaded
    assert _loaded_after(OTHER_ACTIONS) == []


def test_the_first_submit_loads_the_jobs_package() -> None:
    # Given the same modules / When the submit line is built (as the first submit does)
    then = "import dispatch.line\ndispatch.line.submit()\nprint('dispatch.jobs.stage' in sys.modules)\n"
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(modules=OTHER_ACTIONS) + then],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Then the jobs package loads then (the probe above is not blind to it)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "True"
