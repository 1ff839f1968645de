"""Reliability suite: one real local stack per module (moto server, local interpreter, quota
Lambda in the emulator, dispatch in-process), and the report plugin.

Each test records the figures it measured with the `record` fixture; at session end the plugin
writes them, with every test's outcome, to tests/reliability/REPORT.md (`--reliability-full`,
i.e. `make reliability`) or .local/reliability-REPORT.quick.md (quick mode, `make test`), so a
number in the report always comes from the run that wrote it.
"""

from __future__ import annotations

import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.egress_proxy import egress_proxy
from tests.support.stack import Stack, apply_dispatch_env, close_stack, interpreter, open_stack

from . import report

__all__ = ["egress_proxy", "interpreter"]

REPO = Path(__file__).resolve().parents[2]
_RECORDS: dict[str, list[dict[str, Any]]] = defaultdict(list)
_OUTCOMES: dict[str, str] = {}
_REASONS: dict[str, str] = {}


# --- sizes ----------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def examples(reliability_full: bool) -> int:
    """Hypothesis examples per entry point."""
    return 2000 if reliability_full else 50


# --- the real stack, shared by a module -------------------------------------------------------
@pytest.fixture(scope="module")
def shared_stack(moto_server: str, interpreter: Any) -> Iterator[Stack]:  # noqa: F811
    from sandbox_common import aws

    urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST")).read()
    mp = pytest.MonkeyPatch()
    mp.setenv("AWS_ENDPOINT_URL", moto_server)
    for key, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_REGION", "us-east-1"),
    ):
        mp.setenv(key, value)
    aws.clear_clients()
    stack = open_stack(moto_server, interpreter, mp.setenv)
    try:
        yield stack
    finally:
        close_stack(stack)
        for session_id in stack.live_sessions():  # nothing outlives the module
            session = stack.interpreter.session(session_id)
            if session is not None:
                stack.interpreter.manager.terminate(session, "stopped")
        mp.undo()
        aws.clear_clients()


@pytest.fixture
def live(shared_stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    """The module's stack with this test's process pointed at it (a fresh dispatch container)."""
    apply_dispatch_env(shared_stack, monkeypatch.setenv)
    return shared_stack


# --- the report -----------------------------------------------------------------------------
@pytest.fixture
def record(request: pytest.FixtureRequest) -> Callable[..., None]:
    """record(section, **figures): one row of the report, tied to this test's outcome."""

    def add(section: str, **figures: Any) -> None:
        _RECORDS[section].append({"nodeid": request.node.nodeid, **figures})

    return add


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome != "passed":
        previous = _OUTCOMES.get(report.nodeid)
        if previous in (None, "passed"):
            outcome = report.outcome
            if hasattr(report, "wasxfail"):
                outcome = "xfailed" if report.outcome == "skipped" else "xpassed"
                _REASONS[report.nodeid] = str(report.wasxfail)
            _OUTCOMES[report.nodeid] = outcome


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _OUTCOMES:
        return
    full = bool(session.config.getoption("--reliability-full"))
    path = (
        REPO / "tests" / "reliability" / "REPORT.md"
        if full
        else REPO / ".local" / "reliability-REPORT.quick.md"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    text = report.render(
        records=_RECORDS,
        outcomes=_OUTCOMES,
        reasons=_REASONS,
        mode="full" if full else "quick",
        generated_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    path.write_text(text, encoding="utf-8")
