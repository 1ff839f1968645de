"""JavaScript and TypeScript programs in a local session, as the session runner sends them (one
Python `executeCode` whose driver runs the program with the session runtime's Node.js runner): each
call a fresh Node.js process in the session's working directory and environment as they are now,
the Node.js started ahead for the next call used only while those still hold, and only the last
language's processes kept waiting."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sandbox_runtime.runner import programs

from tests.integration.interpreter._helpers import SANDBOX_CI, invoke

# The Node.js processes of the session other than the caller (by /proc/PID/comm), with their
# arguments: read again while one is still starting (its argv is rewritten then), up to 30 s.
WAITING = """
import os, time
def nodes():
    found = []
    for pid in os.listdir('/proc'):
        try:
            comm = open(f'/proc/{pid}/comm').read().strip()
            argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')
        except OSError:
            continue
        if comm == 'node':
            found.append(argv)
    return found
until = time.monotonic() + 30
while any(not argv[0].endswith(b'node') for argv in nodes()) and time.monotonic() < until:
    time.sleep(0.05)
print(sorted(b' '.join(a for a in argv[1:] if a and len(a) < 40).decode() for argv in nodes()))
"""

# Kills every Node.js of the session (the one started ahead for the next call), and waits until each
# is dead (a zombie its parent, the kernel, has not reaped yet, or gone).
KILL_NODES = """
import os, signal, time
def state(pid):
    try:
        return open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0]
    except OSError:
        return 'gone'
killed = []
for pid in os.listdir('/proc'):
    try:
        comm = open(f'/proc/{pid}/comm').read().strip()
    except OSError:
        continue
    if comm == 'node':
        os.kill(int(pid), signal.SIGKILL)
        killed.append(pid)
until = time.monotonic() + 30
while any(state(pid) not in ('Z', 'gone') for pid in killed) and time.monotonic() < until:
    time.sleep(0.01)
print('killed', len(killed))
"""


@pytest.fixture
def sbx(client: Any) -> Iterator[str]:
    session_id = client.start_code_interpreter_session(
        codeInterpreterIdentifier=SANDBOX_CI, sessionTimeoutSeconds=300
    )["sessionId"]
    yield session_id
    try:
        client.stop_code_interpreter_session(codeInterpreterIdentifier=SANDBOX_CI, sessionId=session_id)
    except client.exceptions.ResourceNotFoundException:
        pass


def program(client: Any, session: str, code: str, language: str = "javascript") -> dict[str, Any]:
    structured, _, _ = invoke(client, SANDBOX_CI, session, programs.program_source(code, language, 30.0))
    return structured


def python(client: Any, session: str, code: str) -> str:
    structured, _, _ = invoke(client, SANDBOX_CI, session, code)
    assert structured["exitCode"] == 0, structured
    return str(structured["stdout"])


def waiting(client: Any, session: str, expected: str) -> str:
    """The session's waiting Node.js processes, read again until they are `expected` (the one for
    the next program is started, and the one before it ends, after the call has answered)."""
    deadline = time.monotonic() + 60
    seen = python(client, session, WAITING)
    while seen != expected and time.monotonic() < deadline:
        time.sleep(0.2)
        seen = python(client, session, WAITING)
    return seen


def test_each_call_is_a_fresh_process_in_the_kernels_present_directory_and_environment(
    client: Any, sbx: str
) -> None:
    # Given a program that leaves a global and reports where it runs
    first = program(client, sbx, "globalThis.seen = 1; console.log(process.cwd(), process.env.MARK || '-')")
    # When Python changes the working directory and the environment, and the next program asks
    python(
        client,
        sbx,
        "import os\nos.makedirs('sub', exist_ok=True)\nos.chdir('sub')\nos.environ['MARK'] = 'set'",
    )
    second = program(
        client, sbx, "console.log(process.cwd(), process.env.MARK || '-', typeof globalThis.seen)"
    )
    # Then the second ran in the directory and environment Python left, in a process of its own
    assert first["stdout"] == "/workspace -\n", first
    assert second["stdout"] == "/workspace/sub set undefined\n", second
    third = program(client, sbx, "console.log(process.pid !== Number(process.env.NOPE), typeof seen)")
    assert third["stdout"] == "true undefined\n"


def test_only_the_last_languages_node_processes_wait(client: Any, sbx: str) -> None:
    # Given a JavaScript call / Then one Node.js waits for the next JavaScript program
    assert program(client, sbx, "console.log(1)")["stdout"] == "1\n"
    assert waiting(client, sbx, "['-']\n") == "['-']\n"
    # When a TypeScript call runs / Then the JavaScript one is gone; the TypeScript runner and the
    # transpiler wait instead
    assert program(client, sbx, "const n: number = 2; console.log(n)", "typescript")["stdout"] == "2\n"
    assert waiting(client, sbx, "['--input-type=module -', '-e']\n") == "['--input-type=module -', '-e']\n"
    # And when the Node.js waiting for the next call is killed (anything in the session may), the
    # next call starts a new one
    assert program(client, sbx, "console.log(0)")["stdout"] == "0\n"
    assert waiting(client, sbx, "['-']\n") == "['-']\n"
    assert python(client, sbx, KILL_NODES) == "killed 1\n"
    assert program(client, sbx, "console.log('after')")["stdout"] == "after\n"
