"""The guard of tests/unit/conftest.py, run by a real pytest over a fake tree: a unit test that
starts a process fails, however it starts it (subprocess, fork, a thread of a fixture it uses, an
import at collection); a unit test that starts none passes, even while a fixture of another test
keeps starting processes in the background of the same run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

_GUARD = """
from tests.unit.conftest import (
    pytest_make_collect_report,
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
)
"""

_BACKGROUND = '''
import subprocess
import threading

import pytest

import background


@pytest.fixture(scope="session")
def busy_stack():
    """Starts a process every few milliseconds until the run ends (another test's stack)."""
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            subprocess.run(["true"], check=True)
            background.started.release()
            stop.wait(0.005)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


def test_a_stack_that_starts_processes(busy_stack):
    assert background.started.acquire(timeout=60)
'''

_UNIT = '''
import os
import queue
import subprocess
import threading

import pytest

import background


def test_pure():
    assert sum(range(4)) == 6


def test_pure_while_another_tests_stack_starts_processes():
    # the other test's stack starts processes meanwhile: none is charged to this test
    for _ in range(3):
        assert background.started.acquire(timeout=60)


def test_subprocess():
    subprocess.run(["true"], check=True)


def test_fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


@pytest.fixture(scope="module")
def server():
    """A server thread that starts a process for each request it is given (a local interpreter)."""
    requests, done = queue.Queue(), queue.Queue()

    def serve():
        while (item := requests.get()) is not None:
            done.put(subprocess.run(["true"]).returncode)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield requests, done
    requests.put(None)
    thread.join()


def test_through_a_fixtures_thread(server):
    requests, done = server
    requests.put("start a session")
    assert done.get(timeout=60) == 0
'''


def _run(tmp_path: Path) -> tuple[dict[str, str], str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    (tmp_path / "background.py").write_text("import threading\n\nstarted = threading.Semaphore(0)\n")
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.support.process_hooks"]\n')
    (tmp_path / "a_other").mkdir()
    (tmp_path / "a_other" / "test_stack.py").write_text(textwrap.dedent(_BACKGROUND))
    unit = tmp_path / "unit"
    unit.mkdir()
    (unit / "conftest.py").write_text(_GUARD)
    (unit / "test_some.py").write_text(textwrap.dedent(_UNIT))
    (unit / "test_import.py").write_text(
        "import subprocess\n\nsubprocess.run(['true'])\n\n\ndef test_x():\n    pass\n"
    )
    report = tmp_path / "report.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "--continue-on-collection-errors"]
        + [f"--junitxml={report}", "a_other", "unit"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    outcomes: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        outcomes[f"{case.get('classname')}.{case.get('name')}"] = "failed" if failed else "passed"
    return outcomes, done.stdout + done.stderr


def test_process_guard_fails_exactly_the_unit_tests_that_start_a_process(tmp_path: Path) -> None:
    # Given a fake tree: another suite whose session stack keeps starting processes, and unit tests
    # When a real pytest runs it with the guard on the unit directory
    outcomes, output = _run(tmp_path)
    # Then the tests that start a process fail, by whatever way, and say where they belong
    assert outcomes["unit.test_some.test_subprocess"] == "failed", output
    assert outcomes["unit.test_some.test_fork"] == "failed", output
    assert outcomes["unit.test_some.test_through_a_fixtures_thread"] == "failed", output
    assert "a unit test starts no process" in output
    assert "importing unit/test_import.py" in output  # started at import: the module fails to collect
    # and the others pass, the background starts of another test's stack not charged to them
    assert outcomes["unit.test_some.test_pure"] == "passed", output
    assert outcomes["unit.test_some.test_pure_while_another_tests_stack_starts_processes"] == "passed", output
    assert outcomes["a_other.test_stack.test_a_stack_that_starts_processes"] == "passed", output
