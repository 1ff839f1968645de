"""JavaScript and TypeScript in the session runner: the executeCode call that runs a Node.js program.

A program travels as one `executeCode` call in the session's Python kernel, the same tool every
Python call and shell command uses, on AgentCore and on the local interpreter alike: a fixed driver
loads the session runtime's Node.js runner (`sandbox_session.node`) and shell runtime
(`sandbox_session.shell`), both shipped as their source and kept by the session while unchanged,
and hands them the program, which travels as base64 data and reaches Node.js byte-exact on a pipe —
never joined with anything. Its output is relayed through the session's `sys.stdout` /
`sys.stderr`, so through the in-session redactor, like Python output and a shell script's
(docs/decisions.md says why this, and not AgentCore's own `javascript` / `typescript` executeCode).

The deadline is a shell script's (`commands.inner_deadline`): the program is stopped with
everything it started a little before the runner's own deadline, its output so far is kept, and the
status is TIMED_OUT; like after a script's timeout, the session is then reset.
"""

from __future__ import annotations

import base64
from functools import lru_cache
from pathlib import Path

from sandbox_session import node as node_runtime
from sandbox_session import shell as shell_runtime

LANGUAGES = node_runtime.LANGUAGES  # javascript, typescript

# Each runtime module is compiled once per session (kept in sys.modules under its name while its
# source is unchanged), as the cell driver keeps the cell runtime.
_DRIVER = """\
def _sbx_program(sources, code_b64, language, deadline_s):
    import sys, types
    loaded = []
    for name, source in sources:
        module = sys.modules.get(name)
        if module is None or getattr(module, "SOURCE", None) != source:
            module = types.ModuleType(name)
            exec(compile(source, "<" + name + ">", "exec", dont_inherit=True), module.__dict__)
            module.SOURCE = source
            sys.modules[name] = module
        loaded.append(module)
    shell, node = loaded
    node.main(shell, code_b64, language, deadline_s)


try:
    _sbx_program({sources!r}, {code!r}, {language!r}, {deadline!r})
finally:
    del _sbx_program
"""


@lru_cache(maxsize=1)
def runtime_sources() -> tuple[tuple[str, str], tuple[str, str]]:
    """(module name, source) of the shell runtime and the Node.js runner, in the driver's order."""
    return (
        ("_sbx_shell", Path(shell_runtime.__file__).read_text(encoding="utf-8")),
        ("_sbx_node", Path(node_runtime.__file__).read_text(encoding="utf-8")),
    )


def program_source(code: str, language: str, deadline_seconds: float) -> str:
    """The executeCode source that runs `code` (JavaScript or TypeScript) with Node.js in the
    session, stopped at `deadline_seconds`."""
    if language not in LANGUAGES:
        raise ValueError(f"not a Node.js language: {language!r}")
    encoded = base64.b64encode(code.encode("utf-8")).decode("ascii")
    return _DRIVER.format(
        sources=runtime_sources(), code=encoded, language=language, deadline=float(deadline_seconds)
    )
