"""Outcome classification, first match wins:
timeout → oom → error → ok.

`timeout` is decided by the runner's deadline (or the session's inner deadline before it) and
`oom` from what the sandbox reports (exit 137 = SIGKILL by the OOM killer, or a traceback ending
in MemoryError): both come from observable facts of this call, not from host exceptions that
never occur (a peer-system bug). A process the sandbox reports killed by a signal that was not the
OOM killer's (`naming.REASON_KILLED_BY_SIGNAL`) is an `error` naming the signal, before the oom
rule.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from sandbox_common import naming as n
from sandbox_common.errors import SandboxError, SandboxFailure, SandboxOOM, SandboxTimeout

from .stream import PROTOCOL_ERROR

OOM_EXIT_CODE = 137

# What a timeout did to the session: Python code the session stopped at its inner deadline keeps
# it; the runner's own deadline (and a shell script's timeout) stops it.
_SESSION_KEPT = (
    "Its output until then is shown; the sandbox session was kept, so variables and files from earlier "
    "calls in this turn are still there."
)
_SESSION_RESET = (
    "The sandbox session was reset, so variables and files from earlier calls in this turn are gone."
)

# A traceback's final line: "pkg.mod.SomeError: message" or a bare "MemoryError", at column 0.
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt))(?::.*)?$", re.MULTILINE
)


# What the interpreter reports for a process killed by a signal that was not the OOM killer's.
_KILLED_BY_SIGNAL = re.compile(rf"^{n.REASON_KILLED_BY_SIGNAL}:(\d+):", re.MULTILINE)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def last_exception(stderr: str) -> str | None:
    """Name of the last exception line in stderr (module prefix dropped), if any."""
    names = _EXCEPTION_LINE.findall(stderr)
    return names[-1] if names else None


@dataclass(frozen=True)
class Classification:
    exit_status: str  # ok | timeout | oom | error
    error: type[SandboxFailure] | None
    error_message: str | None
    failure_reason: str | None


OK = Classification("ok", None, None, None)


def classify(
    *,
    timed_out: bool,
    call_timeout_seconds: int,
    session_kept: bool = False,
    exit_code: int | None,
    stderr_tail: str,
    is_error: bool,
    stream_error: str | None,
    result_events: int,
    stream_error_message: str = "",
    api_error: str | None = None,
) -> Classification:
    if timed_out:
        return Classification(
            "timeout",
            SandboxTimeout,
            f"The code did not finish within the {call_timeout_seconds}-second limit and was stopped. "
            + (_SESSION_KEPT if session_kept else _SESSION_RESET),
            f"deadline_exceeded:{call_timeout_seconds}s"
            + (f":{n.REASON_STOPPED_IN_SESSION}" if session_kept else ""),
        )
    killed = _KILLED_BY_SIGNAL.search(stderr_tail)
    if killed is not None and exit_code is not None and exit_code > 128:
        signum = int(killed.group(1))
        return Classification(
            "error",
            SandboxError,
            f"The code's process was killed by signal {signum} ({_signal_name(signum)}); the sandbox "
            "session ended, so variables and files from earlier calls in this turn are gone.",
            f"{n.REASON_KILLED_BY_SIGNAL}:{signum}",
        )
    if exit_code == OOM_EXIT_CODE or last_exception(stderr_tail) == "MemoryError":
        reason = f"exit_code:{exit_code}" if exit_code == OOM_EXIT_CODE else "memory_error"
        return Classification(
            "oom",
            SandboxOOM,
            "The code ran out of memory in the sandbox. Try processing less data at a time.",
            reason,
        )
    unread = _unread(api_error, stream_error, stream_error_message, result_events)
    if unread is not None:
        return unread
    if exit_code not in (None, 0):
        return Classification(
            "error",
            SandboxError,
            f"The code exited with status {exit_code}; see stderr for details.",
            f"exit_code:{exit_code}",
        )
    if is_error:
        return Classification(
            "error", SandboxError, "The code raised an error; see stderr for details.", "is_error"
        )
    if exit_code is None and stderr_tail:
        return Classification(
            "error",
            SandboxError,
            "The code wrote to stderr and reported no exit status; see stderr for details.",
            "stderr_without_exit_code",
        )
    return OK


def _unread(
    api_error: str | None, stream_error: str | None, stream_error_message: str, result_events: int
) -> Classification | None:
    """The code's result never came back whole: the invoke failed, the stream could not be read or
    failed, or it carried no result. None when the result came back."""
    if api_error is not None:
        return Classification(
            "error",
            SandboxError,
            "The sandbox could not run the code because of a service error; please try again.",
            f"invoke_failed:{api_error}",
        )
    if stream_error == PROTOCOL_ERROR:
        return Classification(
            "error",
            SandboxError,
            "The sandbox's answer could not be read, so its session was ended; the next call starts a "
            "fresh one.",
            f"protocol_error:{stream_error_message}".rstrip(":"),
        )
    if stream_error is not None:
        return Classification(
            "error",
            SandboxError,
            f"The sandbox stream failed ({stream_error}) before the result was complete; please try again.",
            # Whole message: the runner redacts the reason, then cuts it (a cut before redaction
            # could leave a token's head too short to be recognised).
            f"stream_exception:{stream_error}:{stream_error_message}".rstrip(":"),
        )
    if result_events == 0:
        return Classification(
            "error",
            SandboxError,
            "The sandbox returned no result for this code; please try again.",
            "empty_stream",
        )
    return None
