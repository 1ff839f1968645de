"""The session runtime (sandbox_session) run as shipped: the way a session runs it — successive
cells in one persistent interpreter — in an interpreter that has nothing but the standard library
(`python -I -S`: no site-packages, no PYTHONPATH, so none of our packages and no third-party one).
That the text shipped is the package's source: tests/unit/session_runtime/test_shipped_text.py.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_common.redaction import REPLACEMENT
from sandbox_common.redaction.stdio import check_readiness, preamble_source
from sandbox_common.tools_protocol import installer_source, resume_source, split_marker, start_source
from sandbox_runtime.runner import cells, commands, job_snippets
from sandbox_session import cell, jobs, tools

SECRET = "s3cr3t-registered-value"
TOKEN = "ghp_" + "A1b2C3d4" * 5  # a GitHub token shape of the catalogue
END = "__cell_end__"

# A session's kernel in miniature: one process, one namespace, each cell compiled and run in turn
# (its exception printed, like the interpreter's), its output flushed, then the end-of-cell line.
KERNEL = f"""
import json, sys, traceback
namespace = {{"__name__": "__main__"}}
for line in sys.stdin:
    try:
        exec(compile(json.loads(line), "<cell>", "exec"), namespace)
    except BaseException:
        traceback.print_exc()
    sys.stderr.flush()
    print({END!r}, flush=True)
"""


class BareSession:
    """A persistent stdlib-only interpreter fed cells on stdin, as a session's kernel is."""

    def __init__(self, env: dict[str, str], stderr: Path) -> None:
        self._stderr = stderr.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", KERNEL],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
        )

    def run(self, code: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(code) + "\n")
        self.proc.stdin.flush()
        lines = []
        for line in self.proc.stdout:
            if line == END + "\n":
                return "".join(lines)
            lines.append(line)
        raise AssertionError(f"the session ended: {self.proc.wait()}")

    def errors(self) -> str:
        """What the kernel printed on stderr so far (the tracebacks of the cells)."""
        self._stderr.flush()
        return Path(self._stderr.name).read_text(encoding="utf-8")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self._stderr.close()


@pytest.fixture
def session(tmp_path: Path) -> Iterator[BareSession]:
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(tmp_path), "LANG": "C.UTF-8"}
    bare = BareSession(env, tmp_path / "stderr")
    try:
        yield bare
    finally:
        bare.close()


def test_redactor_and_tools_run_as_shipped_with_the_stdlib_alone(session: BareSession) -> None:
    # Given a bare session that ran the readiness call (redactor preamble + tools installer)
    ready = session.run(preamble_source([SECRET]) + "\n" + installer_source())
    assert check_readiness(ready), ready
    # When a cell prints a token and the registered secret, and reports what it could import
    printed = session.run(
        "import sys\n"
        f"print('token', {TOKEN!r}, 'secret', {SECRET!r})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sandbox_common', 'sandbox_session')))\n"
        "print('sandbox_tools' in sys.modules)\n"
    )
    # Then both are redacted, none of our packages was loaded, and sandbox_tools is installed
    assert printed == f"token {REPLACEMENT} secret {REPLACEMENT}\n[]\nTrue\n"
    # When code calls a tool: it pauses at the call; the resume answers it and the code ends
    paused_out, paused = split_marker(
        session.run(
            start_source(
                "from sandbox_tools import tools\nprint('got', tools.lookup(k=1)['v'])",
                allow=["lookup"],
                max_calls=3,
                max_input_bytes=1024,
            )
        )
    )
    assert (
        paused is not None
        and paused.paused
        and (paused.name, json.loads(paused.input_json or "")) == ("lookup", {"k": 1})
    )
    done_out, done = split_marker(session.run(resume_source(paused.seq, result_json='{"v": 42}')))
    # Then the program's output is its own, and the runtime reports it done after one call
    assert (paused_out, done_out) == ("", "got 42\n")
    assert done is not None and done.state == tools.STATE_DONE and done.calls == 1


def test_shell_commands_run_as_shipped_through_the_redactor(session: BareSession) -> None:
    # Given a bare session that ran the readiness call (its stdout / stderr are the redactor)
    assert check_readiness(session.run(preamble_source([SECRET]) + "\n" + installer_source()))
    # When a command prints a token and the registered secret, split across two writes
    half = len(TOKEN) // 2
    printed = session.run(
        commands.command_source(
            f"printf '%s' token {TOKEN[:half]}; printf '%s\\n' {TOKEN[half:]} && echo secret {SECRET}", 30
        )
    )
    # Then bash's output reached the kernel's stdout through the redactor
    assert printed == f"token{REPLACEMENT}\nsecret {REPLACEMENT}\n"
    # When a command outlives its deadline after writing / Then what it wrote before is kept
    assert session.run(commands.command_source("echo before\nsleep 30\necho never", 0.5)) == "before\n"


def test_python_cells_run_as_shipped_stop_at_their_deadline_and_keep_the_session(
    session: BareSession,
) -> None:
    # Given a bare session that ran the readiness call (its stdout / stderr are the redactor)
    assert check_readiness(session.run(preamble_source([SECRET]) + "\n" + installer_source()))
    # When a cell sets a variable, prints a token, then sleeps past its 0.2 s deadline
    code = f"x = 21\nprint('before', {TOKEN!r})\nimport time\ntime.sleep(60)"
    printed = session.run(cells.cell_source(code, 0.2))
    # Then it was stopped there: what it printed is kept, redacted, and the cell ended with status 124
    assert printed == f"before {REPLACEMENT}\n"
    assert session.errors().rstrip().endswith(f"SystemExit: {cell.TIMED_OUT}")
    # And the session carries on: the variable is there, a trailing expression is displayed
    assert session.run(cells.cell_source("x * 2", 5)) == "42\n"
    # When code swallows the stop, it is raised again until the code gives up
    swallowing = (
        "n = 0\nwhile n < 2:\n    try:\n        time.sleep(60)\n    except BaseException:\n        n += 1"
    )
    assert (
        session.run(cells.cell_source(swallowing + "\nprint('gave up after', n)", 0.1)) == "gave up after 2\n"
    )
    # When code raises, the traceback shows the code's frames, not the runtime's
    before = len(session.errors())
    assert session.run(cells.cell_source("def f():\n    return 1 / 0\nf()", 5)) == ""
    traceback = session.errors()[before:]
    assert "ZeroDivisionError" in traceback and 'File "<code-' in traceback and "_sbx_cell>" not in traceback
    # And after all of it, the SIGALRM handler is the one before, and the runtime was compiled once
    # (its cell counter went on across the four cells)
    probe = "import signal, sys\nprint(signal.getsignal(signal.SIGALRM) is signal.SIG_DFL)\n"
    probe += f"print(sys.modules[{cells.MODULE!r}]._STATE['cell'])"
    assert session.run(probe) == "True\n4\n"


def test_jobs_run_as_shipped_with_the_stdlib_alone(session: BareSession, tmp_path: Path) -> None:
    # Given a bare session and a background job that prints a token and the registered secret
    code = f"print('token', {TOKEN!r})\nprint('secret', {SECRET!r})\nprint('done')\n"
    # When the job is submitted with the runtime (written into the session's temp dir) and polled
    submitted = job_snippets.parse_marker(
        session.run(job_snippets.submit_source("job-1", code, 60, [SECRET]))
    )
    assert submitted is not None and submitted["state"] == jobs.RUNNING, submitted
    status = submitted
    deadline = time.monotonic() + 120  # a bound on a hang only: the loop waits on the job's state
    while status["state"] == jobs.RUNNING and time.monotonic() < deadline:
        time.sleep(0.05)
        answer = job_snippets.parse_marker(
            session.run(job_snippets.status_source("job-1", out_limit=4096, err_limit=4096))
        )
        assert answer is not None
        status = answer
    # Then it completed under its own redactor, and the runtime files are the package's sources
    assert (status["state"], status["exit_code"]) == (jobs.COMPLETED, 0), status
    stdout = base64.b64decode(status["stdout_b64"]).decode()
    assert stdout == f"token {REPLACEMENT}\nsecret {REPLACEMENT}\ndone\n"
    shipped = tmp_path / job_snippets.JOBS_DIR_NAME / jobs.RUNTIME_FILE
    assert shipped.read_text(encoding="utf-8") == Path(jobs.__file__).read_text(encoding="utf-8")
