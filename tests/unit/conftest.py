"""A unit test starts no process: not a subprocess, a fork, a local stack, an interpreter session
or CDK's Node. That keeps `make test-quick` (this directory and the other process-free suites)
inside its two minutes; a test that needs a real process lives under tests/integration, tests/cli,
tests/infra or tests/reliability. Which starts count, and which are charged to which test:
tests/support/processes.py."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from tests.support import processes

_WHERE = "a unit test starts no process: move it under tests/integration (or tests/cli, tests/infra)"


def _refuse(starts: list[processes.Start]) -> str:
    shown = "; ".join(f"{start.via}: {start.what or '(fork)'}" for start in starts[:3])
    more = f" (and {len(starts) - 3} more)" if len(starts) > 3 else ""
    return f"{_WHERE}. It started {len(starts)}: {shown}{more}"


_failed: set[str] = set()  # reported once, not again by the test's later phases


def _check(nodeid: str) -> None:
    starts = processes.starts_of(nodeid)
    if starts and nodeid not in _failed:
        _failed.add(nodeid)
        pytest.fail(_refuse(starts), pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    report = yield
    starts = processes.starts_of(collector.nodeid)
    if starts and report.outcome != "failed":
        report.outcome = "failed"
        report.longrepr = f"importing {collector.nodeid}: {_refuse(starts)}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    yield
    _check(item.nodeid)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    yield
    _check(item.nodeid)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    yield
    _check(item.nodeid)
