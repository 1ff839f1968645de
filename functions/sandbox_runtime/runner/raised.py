"""What the code raised: the structured `exception` of an answer (`name`, `value`, `traceback`), as a
notebook's error output and E2B's `Execution.error` carry it.

The session reports an uncaught exception the way its runtime always does — the traceback on
stderr, a non-zero status — and the runner reads it back from that stderr after host-side
redaction, once, here: every client (the agent client, the MCP server, the Strands tools) gets the
same structure from dispatch's answer, and no client parses tracebacks.

- Python: the last traceback (`Traceback (most recent call last):`, with the exceptions chained
  before it, or IPython's `<Name>  Traceback (most recent call last)` header, colours removed);
  its exception line `pkg.Name: message` (a bare `Name` too) gives the name (module prefix
  dropped) and the value (the message, with the lines that follow it).
- JavaScript / TypeScript (Node.js): the last uncaught error Node prints (`Name: message` at the
  start of a line, then its `    at ...` stack), from the source line Node shows above it.
- A shell script's stderr is the script's own: nothing is read from it.

Only failures are read (a run that ended `ok` has no exception), and only stderr's last report
counts: what the code printed before is its output.
"""

from __future__ import annotations

import re
from typing import Any

from sandbox_common.tool_spec import COMMAND_LANGUAGE

# The largest traceback and value an answer carries (the tail of the traceback: the frames nearest
# the error, and the exception line, are at its end).
MAX_TRACEBACK_CHARS = 16 * 1024
MAX_VALUE_CHARS = 2048
MESSAGE_VALUE_CHARS = 300  # of the value, in the error message's sentence
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PY_HEADER = re.compile(
    r"^(?:Traceback \(most recent call last\):|\S+\s+Traceback \(most recent call last\))$"
)
_PY_CHAINED = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
# `pkg.mod.Name: message` or a bare `Name`, at column 0 (frames and source lines are indented)
_PY_EXCEPTION = re.compile(r"^((?:[A-Za-z_]\w*\.)*)([A-Za-z_]\w*)(?:: ?(.*))?$")
_PY_SYNTAX_ERRORS = ("SyntaxError", "IndentationError", "TabError")
_PY_FILE_LINE = re.compile(r'^\s+File ".*", line \d+')
_PY_SYNTAX_REPORT_LINES = 4  # File line, source line, caret line
# Node's report of an uncaught error: `Name: message` (or `Name`) followed by its stack
_JS_EXCEPTION = re.compile(r"^([A-Za-z_$][\w$]*(?:Error|Exception))(?:: ?(.*))?$")
_JS_FRAME = re.compile(r"^\s+at ")
_JS_FOOTER = re.compile(r"^Node\.js v\d")
_JS_LOCATION = re.compile(r"^\S.*:\d+$")  # `[stdin]:3`, `/workspace/x.js:3`
_JS_REPORT_LINES = 5  # location, source line, caret, blank lines: at most this far above the error


def raised(stderr: str, language: str) -> dict[str, Any] | None:
    """`{"name", "value", "traceback"}` of the exception the code ended with, read from its
    (redacted) stderr, or None when it reports none (or the language's stderr is not read)."""
    if language == COMMAND_LANGUAGE or not stderr:
        return None
    lines = _ANSI.sub("", stderr).splitlines()
    found = _python(lines) if language == "python" else _node(lines)
    if found is None:
        return None
    name, value, traceback = found
    return {
        "name": name,
        "value": value[:MAX_VALUE_CHARS],
        "traceback": traceback[-MAX_TRACEBACK_CHARS:],
    }


def raised_message(exception: dict[str, Any]) -> str:
    """The sentence of a SandboxError whose code raised `exception`."""
    value = exception["value"].splitlines()[0] if exception["value"] else ""
    if len(value) > MESSAGE_VALUE_CHARS:
        value = value[: MESSAGE_VALUE_CHARS - 3] + "..."
    said = f"{exception['name']}: {value}" if value else exception["name"]
    return f"The code raised {said}; see stderr for the traceback."


def _python(lines: list[str]) -> tuple[str, str, str] | None:
    headers = [i for i, line in enumerate(lines) if _PY_HEADER.match(line)]
    if not headers:
        return _python_syntax(lines)
    start = headers[-1]
    for index in range(start + 1, len(lines)):
        line = lines[index]
        if not line or line[0].isspace() or line.startswith(("Cell In[", "File ", "---")):
            continue
        match = _PY_EXCEPTION.match(line)
        if match is None:
            continue
        rest = "\n".join([match.group(3) or "", *lines[index + 1 :]]).strip()
        while start > 0 and any(_chained_before(lines, start, h) for h in _PY_CHAINED):
            earlier = [i for i in headers if i < start]
            if not earlier:
                break
            start = earlier[-1]
        return match.group(2), rest, "\n".join(lines[start:]).rstrip() + "\n"
    return None


def _python_syntax(lines: list[str]) -> tuple[str, str, str] | None:
    """A SyntaxError reported without a traceback (code that never started): `  File "...", line
    N`, the source line and caret, then `SyntaxError: message`."""
    for index in range(len(lines) - 1, 0, -1):
        match = _PY_EXCEPTION.match(lines[index])
        if match is None or match.group(2) not in _PY_SYNTAX_ERRORS:
            continue
        for start in range(index - 1, max(-1, index - 1 - _PY_SYNTAX_REPORT_LINES), -1):
            if _PY_FILE_LINE.match(lines[start]):
                rest = "\n".join([match.group(3) or "", *lines[index + 1 :]]).strip()
                return match.group(2), rest, "\n".join(lines[start:]).rstrip() + "\n"
    return None


def _chained_before(lines: list[str], header: int, separator: str) -> bool:
    """The lines just before `header` (blank ones skipped) end with a chaining sentence."""
    index = header - 1
    while index >= 0 and not lines[index].strip():
        index -= 1
    return index >= 0 and lines[index].strip() == separator


def _node(lines: list[str]) -> tuple[str, str, str] | None:
    for index in range(len(lines) - 1, -1, -1):
        match = _JS_EXCEPTION.match(lines[index])
        if match is None:
            continue
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if following.strip() and not (_JS_FRAME.match(following) or _JS_FOOTER.match(following)):
            continue  # a line of the code's own output that only looks like an error
        end = index + 1
        while end < len(lines) and _JS_FRAME.match(lines[end]):
            end += 1
        start = _node_report_start(lines, index)
        return match.group(1), (match.group(2) or "").strip(), "\n".join(lines[start:end]).rstrip() + "\n"
    return None


def _node_report_start(lines: list[str], index: int) -> int:
    """Where Node's report of the error at `index` begins: the `file:line` of the throw it prints a
    few lines above (with the source line and a caret), else the error line itself."""
    for above in range(index - 1, max(-1, index - 1 - _JS_REPORT_LINES), -1):
        if _JS_LOCATION.match(lines[above]):
            return above
    return index
