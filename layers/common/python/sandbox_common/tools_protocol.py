"""Host side of programmatic tool calling: the code the runner sends to drive the
in-sandbox runtime (`sandbox_session.tools`), and the parser of the marker it answers with.

What travels, and how it squares with the runner's rule ("user code byte-exact, never concatenated"):
the user's code is sent base64-encoded inside a fixed one-line driver expression
(`start_source`). The runtime decodes exactly those bytes and compiles them as a cell of their
own (own filename, own AST), so the code that runs is the user's code byte for byte and is never
joined with anything at the language level; the audit hash is taken over the user's code alone
(never over the driver). Base64 keeps the driver a constant shape whatever the code contains
(quotes, backslashes, NUL), so no user text can escape into the driver.

Sizes: a driver is the code's base64 (4/3) plus ~200 bytes; a resume carries the tool result as
hex (2×, results are bounded at 1 MiB serialized).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from sandbox_session import tools as tools_runtime
from sandbox_session.tools import (
    MARKER,
    PRIVATE_MODULE,
    STATE_BUSY,
    STATE_DONE,
    STATE_IDLE,
    STATE_TOOL_CALL,
)

_RUNTIME = f'__import__("sys").modules[{PRIVATE_MODULE!r}]'
STATUS_SOURCE = f"{_RUNTIME}.status()"
_TAIL = "\n" + MARKER

_INSTALLER = """\
def _sbx_install_tools(source, name):
    import sys, types
    try:
        module = types.ModuleType(name)
        sys.modules[name] = module
        exec(compile(source, "<" + name + ">", "exec"), module.__dict__)
        module.install()
    except Exception as exc:  # tool calls then fail visibly; the redactor's readiness is unaffected
        sys.modules.pop(name, None)
        sys.__stderr__.write("sandbox tools runtime install failed: %s\\n" % type(exc).__name__)


_sbx_install_tools({source!r}, {name!r})
del _sbx_install_tools
"""


@lru_cache(maxsize=1)
def _runtime_source() -> str:
    return Path(tools_runtime.__file__).read_text(encoding="utf-8")


def installer_source() -> str:
    """Self-contained Python that installs `sandbox_tools` in the session (no output on success).
    Sent within the readiness preamble call, after the redactor's installer."""
    return _INSTALLER.format(source=_runtime_source(), name=PRIVATE_MODULE)


def start_source(code: str, *, allow: Sequence[str], max_calls: int, max_input_bytes: int) -> str:
    """The driver that runs `code` (byte-exact, base64) with the given tool allowlist."""
    encoded = base64.b64encode(code.encode("utf-8")).decode("ascii")
    config = {
        "allow": sorted(set(allow)),
        "max_calls": int(max_calls),
        "max_input_bytes": int(max_input_bytes),
    }
    return f"{_RUNTIME}.start({encoded!r}, {json.dumps(config, sort_keys=True)}, globals())"


def resume_source(seq: int, *, result_json: str | None = None, error: str | None = None) -> str:
    """The driver that answers pending call `seq` with a tool result (its JSON text) or an error."""
    if (result_json is None) == (error is None):
        raise ValueError("exactly one of result_json and error")
    kind, text = ("result", result_json) if result_json is not None else ("error", error)
    payload = str(text).encode("utf-8", "surrogatepass").hex()
    return f"{_RUNTIME}.resume({int(seq)}, {kind!r}, {payload!r})"


@dataclass(frozen=True)
class RuntimeState:
    """What the runtime reported at the end of a slice."""

    state: str  # tool_call | done | idle | busy
    seq: int = 0
    name: str | None = None
    input_json: str | None = None
    calls: int | None = None
    raw_bytes: int = 0  # UTF-8 length of the whole marker line ("\n" + MARKER + hex + "\n")

    @property
    def paused(self) -> bool:
        return self.state == STATE_TOOL_CALL


def _marker_bytes(hex_text: str) -> int:
    return len(_TAIL) + len(hex_text) + 1  # all ASCII


def _decode(hex_text: str) -> RuntimeState | None:
    try:
        data = json.loads(bytes.fromhex(hex_text).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or data.get("state") not in (
        STATE_TOOL_CALL,
        STATE_DONE,
        STATE_IDLE,
        STATE_BUSY,
    ):
        return None
    seq = data.get("seq", 0)
    calls = data.get("calls")
    name = data.get("name")
    raw_input = data.get("input")
    if not isinstance(seq, int) or isinstance(seq, bool):
        return None
    if data["state"] == STATE_TOOL_CALL and not (isinstance(name, str) and isinstance(raw_input, str)):
        return None
    return RuntimeState(
        state=data["state"],
        seq=seq,
        name=name if isinstance(name, str) else None,
        input_json=raw_input if isinstance(raw_input, str) else None,
        calls=calls if isinstance(calls, int) and not isinstance(calls, bool) else None,
        raw_bytes=_marker_bytes(hex_text),
    )


def split_marker(stdout: str) -> tuple[str, RuntimeState | None]:
    """(user stdout, state) when stdout ENDS with the runtime's marker line, else (stdout, None).

    Only a marker that is the very end of the output counts: the runtime writes it after the
    user code's last byte, so anything the code printed (even a forged marker) stays the code's
    output, byte for byte.
    """
    if not stdout.endswith("\n"):
        return stdout, None
    at = stdout.rfind(_TAIL)
    if at < 0:
        return stdout, None
    hex_text = stdout[at + len(_TAIL) : -1]
    if not hex_text or not _is_upper_hex(hex_text):
        return stdout, None
    state = _decode(hex_text)
    if state is None:
        return stdout, None
    return stdout[:at], state


def _is_upper_hex(text: str) -> bool:
    return len(text) % 2 == 0 and text.strip("0123456789ABCDEF") == ""


def find_marker(stdout: str) -> RuntimeState | None:
    """The last well-formed marker anywhere in stdout (for the output of STATUS_SOURCE)."""
    at = len(stdout)
    while True:
        at = stdout.rfind(_TAIL, 0, at)
        if at < 0:
            return None
        end = stdout.find("\n", at + len(_TAIL))
        if end > 0 and _is_upper_hex(stdout[at + len(_TAIL) : end]):
            state = _decode(stdout[at + len(_TAIL) : end])
            if state is not None:
                return state


def parse_input(input_json: str) -> Any:
    return json.loads(input_json)


__all__ = [
    "MARKER",
    "STATUS_SOURCE",
    "RuntimeState",
    "find_marker",
    "installer_source",
    "parse_input",
    "resume_source",
    "split_marker",
    "start_source",
]
