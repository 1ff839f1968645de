"""Shell commands in the session runner: the executeCode call that runs a bash script.

A command travels as one `executeCode` call, the same tool every Python call uses, on AgentCore
and on the local interpreter alike: a fixed driver that loads the shell runtime
(`sandbox_session.shell`, shipped as its source) and runs the script, which travels as base64 data
and reaches bash byte-exact on a pipe — never joined with anything. The script's output is
relayed through the session's `sys.stdout` / `sys.stderr`, so through the in-session redactor,
like Python output (docs/decisions.md says why this, and not AgentCore's `executeCommand`).

The runtime stops the script at an inner deadline a little before the runner's own, so that the
output written before it comes back with the call (a `SandboxTimeout` keeps it); the runner
recognises that end by the TIMED_OUT status arriving no earlier than the inner deadline.
"""

from __future__ import annotations

import base64
from functools import lru_cache
from pathlib import Path

from sandbox_common.tool_spec import CODE_LANGUAGE, COMMAND_LANGUAGE
from sandbox_session import shell as shell_runtime

BASH = COMMAND_LANGUAGE
PYTHON = CODE_LANGUAGE
TIMED_OUT = shell_runtime.TIMED_OUT
# Room left between the script's deadline and the runner's: the kill, the relay's grace and the answer.
MAX_DEADLINE_MARGIN_SECONDS = 5.0
MIN_DEADLINE_MARGIN_SECONDS = 1.0

_DRIVER = """\
def _sbx_command(source, script_b64, deadline_s):
    import types
    module = types.ModuleType("_sbx_shell")
    exec(compile(source, "<_sbx_shell>", "exec"), module.__dict__)
    module.main(script_b64, deadline_s)


try:
    _sbx_command({source!r}, {script!r}, {deadline!r})
finally:
    del _sbx_command
"""


@lru_cache(maxsize=1)
def runtime_source() -> str:
    return Path(shell_runtime.__file__).read_text(encoding="utf-8")


def inner_deadline(limit_seconds: float) -> float:
    """When the session stops a script, given the runner's deadline `limit_seconds`."""
    margin = min(MAX_DEADLINE_MARGIN_SECONDS, max(MIN_DEADLINE_MARGIN_SECONDS, limit_seconds / 10))
    return round(max(0.1, limit_seconds - margin), 3)


def command_source(script: str, deadline_seconds: float) -> str:
    """The executeCode source that runs `script` with bash in the session, stopped at `deadline_seconds`."""
    encoded = base64.b64encode(script.encode("utf-8")).decode("ascii")
    return _DRIVER.format(source=runtime_source(), script=encoded, deadline=float(deadline_seconds))


def stopped_at_deadline(exit_code: int | None, duration_ms: int, deadline_seconds: float) -> bool:
    """The runtime stopped the script at its deadline: its status, no earlier than the deadline
    (a script that exits 124 by itself before it is a plain failure)."""
    return exit_code == TIMED_OUT and duration_ms >= deadline_seconds * 1000
