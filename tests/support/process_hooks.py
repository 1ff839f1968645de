"""pytest's side of tests/support/processes.py: charges every process a test starts to it, and with
`--process-probe=PATH` lists the tests of a run that started one.

    pytest --process-probe=/tmp/starts.jsonl tests/...

Each line of PATH: {"test": node id, "starts": [[via, argv], ...]} (xdist workers append to one
file). A module that starts a process when imported is listed under its own node id.
Loaded by tests/conftest.py; the guard that keeps tests/unit free of processes is in
tests/unit/conftest.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from tests.support import processes


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--process-probe", metavar="PATH", help="append the tests that start a process to PATH (JSON lines)"
    )


def _uses(item: pytest.Item) -> Any:
    info = getattr(item, "_fixtureinfo", None)  # pytest's resolved fixtures of the test
    by_name = getattr(info, "name2fixturedefs", {})

    def uses(fixture: object) -> bool:
        return any(fixture is used for used in by_name.get(getattr(fixture, "argname", None), ()))

    return uses


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    with processes.running(collector.nodeid, lambda _fixture: False):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: Any) -> Generator[None, Any, Any]:
    with processes.setting_up(fixturedef):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with processes.running(item.nodeid, _uses(item)):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with processes.running(item.nodeid, _uses(item)):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    if nextitem is None:  # the run's end: every fixture left is finalized, not just this test's
        return (yield)
    with processes.running(item.nodeid, _uses(item)):
        return (yield)


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--process-probe")
    if not path:
        return
    lines = [
        json.dumps({"test": test, "starts": [[start.via, start.what] for start in starts]})
        for test, starts in sorted(processes.all_starts().items())
    ]
    if lines:
        with Path(path).open("a", encoding="utf-8") as out:  # one write per worker
            out.write("\n".join(lines) + "\n")
            out.flush()
            os.fsync(out.fileno())
