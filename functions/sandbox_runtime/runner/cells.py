"""Python code in the session runner: the executeCode call that runs the user's code under the
session's inner deadline (a timeout keeps the output written before it).

AgentCore's executeCode has no deadline of its own (its arguments carry code, language and
clearContext, nothing that bounds the run): only stopping the session ends a cell, and that takes
the cell's output with it. So the deadline that keeps the output lives in the session: a fixed
driver loads the cell runtime (`sandbox_session.cell`, shipped as its source and kept by the
session while it is unchanged) and hands it the user's code, which travels as base64 of its UTF-8
bytes and is compiled as a cell of its own — byte-exact, never joined with anything (read
as the tools driver reads it, docs/decisions.md). The runtime stops the code at the inner deadline
(`commands.inner_deadline`, as for a shell script) and ends the cell with status TIMED_OUT; the
runner reads that status, arriving no earlier than the inner deadline, as the call's timeout, and
keeps the session. Its own deadline stays the backstop for code the runtime cannot stop.
"""

from __future__ import annotations

import base64
from functools import lru_cache
from pathlib import Path

from sandbox_session import cell as cell_runtime

MODULE = "_sbx_cell"
TIMED_OUT = cell_runtime.TIMED_OUT

# The driver's own lines stay short: a traceback of the code shows the `raise` line of the driver
# above the code's own frames, never the line that carries the runtime and the code.
_DRIVER = """\
def _sbx_cell(source, code_b64, deadline_s, namespace):
    import sys, types
    module = sys.modules.get({module!r})
    if module is None or getattr(module, "SOURCE", None) != source:
        module = types.ModuleType({module!r})
        exec(compile(source, "<" + {module!r} + ">", "exec", dont_inherit=True), module.__dict__)
        module.SOURCE = source
        sys.modules[{module!r}] = module
    return module.run(code_b64, deadline_s, namespace)


try:
    _sbx_raise = _sbx_cell({source!r}, {code!r}, {deadline!r}, globals())
finally:
    del _sbx_cell
if _sbx_raise is not None:
    try:
        raise _sbx_raise
    finally:
        del _sbx_raise
else:
    del _sbx_raise
"""


@lru_cache(maxsize=1)
def runtime_source() -> str:
    return Path(cell_runtime.__file__).read_text(encoding="utf-8")


def cell_source(code: str, deadline_seconds: float) -> str:
    """The executeCode source that runs `code` (byte-exact, base64) stopped at `deadline_seconds`."""
    encoded = base64.b64encode(code.encode("utf-8")).decode("ascii")
    return _DRIVER.format(
        module=MODULE, source=runtime_source(), code=encoded, deadline=float(deadline_seconds)
    )
