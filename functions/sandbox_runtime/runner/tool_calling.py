"""Programmatic tool calling in the session runner (docs/tool-calling.md): run code that may call the
agent's tools, pause at a tool call, resume in the same live session.

One execute_code becomes a chain of *slices*, each one executeCode call on the session:
`execute()` sends the start driver, `resume()` the resume driver (see tools_protocol). A slice
ends when the code blocks in a tool call (-> `Paused`, with a `ToolCallState` the caller keeps
between Lambda invocations) or when it ends (-> `Finished`, an ordinary ExecutionResult plus
`tool_calls` and the per-call records).

What the runner enforces, never trusting the sandbox's word:
- the per-call deadline counts running time only: each slice gets what is left of the call
  timeout after the earlier slices (and never more than the caller's `deadline_seconds`);
- the wait for a tool result is bounded (`wait_seconds`): a later resume ends the call as a
  timeout and stops the session;
- a reported tool call must name an allowlisted tool, carry the next sequence number, stay
  within the call limit and carry parseable, bounded JSON — else the call ends in an error and
  the session (whose runtime can no longer be trusted) is stopped;
- stdout of every slice is stripped of the runtime's marker before anything is counted,
  redacted or shown, and accumulated (bounded: cap + redaction margin per stream) so the final
  result is the concatenation, redacted as one text (a token split across slices is caught).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sandbox_common import limits, messages, naming
from sandbox_common.errors import SandboxError, SandboxFailure, SandboxTimeout
from sandbox_common.tools_protocol import (
    STATUS_SOURCE,
    RuntimeState,
    find_marker,
    resume_source,
    split_marker,
    start_source,
)
from sandbox_session.tools import STATE_BUSY, STATE_DONE

from .classify import Classification
from .errors import SessionGone
from .execution import ExecutionResult, Invocation
from .output import REDACTION_MARGIN_BYTES
from .session import READINESS_TIMEOUT_SECONDS, SessionRunner
from .stream import BoundedText, StreamAccumulator, StreamOutcome

TOOL_WAIT_EXPIRED = messages.TOOL_WAIT_EXPIRED
TOOL_TURN_ENDED = messages.TOOL_TURN_ENDED
TOOL_PROTOCOL_BROKEN = messages.TOOL_PROTOCOL_BROKEN
SESSION_LOST = messages.TOOL_SESSION_LOST
PREVIOUS_CALL_PAUSED = messages.TOOL_PREVIOUS_CALL_PAUSED
# In-sandbox text (the code's ToolError message), not an agent-facing sentence:
RESULT_TOO_LARGE = "tool result is {size} bytes serialized, over the {limit}-byte limit"


@dataclass(frozen=True)
class ToolLimits:
    max_calls: int = limits.TOOLS_MAX_CALLS
    max_result_bytes: int = limits.TOOLS_MAX_RESULT_BYTES
    max_input_bytes: int = limits.TOOLS_MAX_INPUT_BYTES
    wait_seconds: float = limits.TOOLS_WAIT_SECONDS


@dataclass(frozen=True)
class ToolRecord:
    """One tool call as the audit row records it: hashes only, never the input or the result."""

    name: str
    input_sha256: str
    duration_ms: int
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "input_sha256": self.input_sha256,
            "duration_ms": self.duration_ms,
            "ok": self.ok,
        }


@dataclass(frozen=True)
class PendingCall:
    seq: int
    name: str
    input_sha256: str
    paused_at_ms: int  # epoch ms: the wait spans Lambda invocations


@dataclass(frozen=True)
class ToolCall:
    """What the agent runtime must run: the `tool_call` answer."""

    id: str
    name: str
    input: Any

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "input": self.input}


@dataclass(frozen=True)
class ToolCallState:
    """Everything a paused call needs to continue in another Lambda invocation (no tool data)."""

    interpreter_id: str
    session_id: str
    call_ref: str  # prefix of tool_call ids (the invocation id)
    allow: tuple[str, ...]
    running_ms: int
    records: tuple[ToolRecord, ...]
    pending: PendingCall | None
    stdout: BoundedText
    stderr: BoundedText

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe except the two `*_head` values, which are bytes (stored as binary)."""
        return {
            "interpreter_id": self.interpreter_id,
            "session_id": self.session_id,
            "call_ref": self.call_ref,
            "allow": list(self.allow),
            "running_ms": self.running_ms,
            "records": [r.to_dict() for r in self.records],
            "pending": None
            if self.pending is None
            else {
                "seq": self.pending.seq,
                "name": self.pending.name,
                "input_sha256": self.pending.input_sha256,
                "paused_at_ms": self.pending.paused_at_ms,
            },
            "stdout_head": self.stdout.head_bytes,
            "stdout_tail": self.stdout.tail,
            "stdout_bytes": self.stdout.total_bytes,
            "stdout_limit": self.stdout.limit_bytes,
            "stderr_head": self.stderr.head_bytes,
            "stderr_tail": self.stderr.tail,
            "stderr_bytes": self.stderr.total_bytes,
            "stderr_limit": self.stderr.limit_bytes,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCallState:
        pending = data.get("pending")
        return cls(
            interpreter_id=str(data["interpreter_id"]),
            session_id=str(data["session_id"]),
            call_ref=str(data["call_ref"]),
            allow=tuple(str(a) for a in data["allow"]),
            running_ms=int(data["running_ms"]),
            records=tuple(
                ToolRecord(str(r["name"]), str(r["input_sha256"]), int(r["duration_ms"]), bool(r["ok"]))
                for r in data["records"]
            ),
            pending=None
            if not pending
            else PendingCall(
                int(pending["seq"]),
                str(pending["name"]),
                str(pending["input_sha256"]),
                int(pending["paused_at_ms"]),
            ),
            stdout=BoundedText.restore(
                bytes(data["stdout_head"]),
                str(data["stdout_tail"]),
                int(data["stdout_bytes"]),
                int(data["stdout_limit"]),
            ),
            stderr=BoundedText.restore(
                bytes(data["stderr_head"]),
                str(data["stderr_tail"]),
                int(data["stderr_bytes"]),
                int(data["stderr_limit"]),
            ),
        )


@dataclass(frozen=True)
class Paused:
    tool_call: ToolCall
    state: ToolCallState


@dataclass(frozen=True)
class Finished:
    result: ExecutionResult
    tool_calls: int
    records: tuple[ToolRecord, ...] = field(default_factory=tuple)

    def records_for_audit(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.records]


class _MarkerAccumulator(StreamAccumulator):
    """Strips the runtime's marker line off the end of stdout BEFORE it is bounded or counted."""

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(limit_bytes)
        self.marker: RuntimeState | None = None
        self.exact_stdout: int | None = None

    def count_exactly(self, stdout_bytes: int, stderr_bytes: int) -> None:
        # The interpreter's exact count includes the marker line the runtime wrote: not the code's bytes.
        self.exact_stdout = stdout_bytes
        super().count_exactly(stdout_bytes, stderr_bytes)

    def snapshot(self) -> StreamOutcome:
        outcome = super().snapshot()
        if self.exact_stdout is not None and self.marker is not None:
            outcome.stdout.total_bytes = max(0, self.exact_stdout - self.marker.raw_bytes)
        return outcome

    def uncount(self, marker: RuntimeState, outcome: StreamOutcome) -> None:
        """The marker was cut off with oversized output and came from a status call: it is still
        in the interpreter's exact count, so take it out."""
        if self.exact_stdout is not None:
            outcome.stdout.total_bytes = max(0, self.exact_stdout - marker.raw_bytes)

    def feed(self, event: dict[str, Any]) -> None:
        result = event.get("result")
        if isinstance(result, dict):
            result = dict(result)
            structured = result.get("structuredContent")
            if isinstance(structured, dict) and isinstance(structured.get("stdout"), str):
                stdout, marker = split_marker(structured["stdout"])
                if marker is not None:
                    self.marker = marker
                    result["structuredContent"] = {**structured, "stdout": stdout}
            blocks = []
            for block in result.get("content") or ():
                if (
                    isinstance(block, dict)
                    and block.get("type") == "text"
                    and isinstance(block.get("text"), str)
                ):
                    text, marker = split_marker(block["text"])
                    if marker is not None:
                        self.marker = self.marker or marker
                        block = {**block, "text": text}
                blocks.append(block)
            if result.get("content"):
                result["content"] = blocks
            event = {**event, "result": result}
        super().feed(event)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class ToolsRunner:
    """Drives tool-calling code through a SessionRunner (same credentials, caps, redaction)."""

    def __init__(
        self,
        runner: SessionRunner,
        *,
        limits: ToolLimits | None = None,
        wall_clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.runner = runner
        self.limits = limits or ToolLimits()
        self._now_ms = wall_clock_ms or (lambda: int(time.time() * 1000))
        self._stdout_limit = runner.output.stdout_cap_bytes + REDACTION_MARGIN_BYTES
        self._stderr_limit = runner.output.stderr_cap_bytes + REDACTION_MARGIN_BYTES

    # --- the two entry points -----------------------------------------------------------------
    def execute(
        self,
        interpreter_id: str,
        session_id: str,
        code: str,
        *,
        allow: Sequence[str],
        call_ref: str,
        deadline_seconds: float | None = None,
    ) -> Paused | Finished:
        """Start `code` (sent byte-exact, base64 in the driver) with the allowlist `allow`.

        Raises only what SessionRunner.execute raises before code runs: CrossTenantInterpreter
        (before any AWS call) and SessionGone (the session no longer exists; start a fresh one)."""
        self.runner.invoker.check_owned(interpreter_id)
        state = ToolCallState(
            interpreter_id=interpreter_id,
            session_id=session_id,
            call_ref=call_ref,
            allow=tuple(sorted(set(allow))),
            running_ms=0,
            records=(),
            pending=None,
            stdout=BoundedText(self._stdout_limit),
            stderr=BoundedText(self._stderr_limit),
        )
        source = start_source(
            code,
            allow=state.allow,
            max_calls=self.limits.max_calls,
            max_input_bytes=self.limits.max_input_bytes,
        )
        return self._slice(state, source, deadline_seconds, first=True)

    def resume(
        self,
        state: ToolCallState,
        *,
        tool_result: Any = None,
        tool_error: str | None = None,
        has_result: bool = True,
        deadline_seconds: float | None = None,
    ) -> Paused | Finished:
        """Answer the pending tool call with `tool_result` (any JSON value) or `tool_error`
        (pass has_result=False with it) and run the code to its next tool call or its end.

        A result over the size bound reaches the code as a ToolError; a wait beyond
        `limits.wait_seconds` ends the call as a timeout (session stopped, nothing sent)."""
        self.runner.invoker.check_owned(state.interpreter_id)
        pending = state.pending
        if pending is None:
            raise ValueError("state has no pending tool call")
        now = self._now_ms()
        waited_ms = max(0, now - pending.paused_at_ms)
        if waited_ms > self.limits.wait_seconds * 1000:
            return self.expire(state, now_ms=now)
        if has_result:
            try:
                result_json = json.dumps(
                    tool_result, allow_nan=False, separators=(",", ":"), ensure_ascii=False
                )
            except (TypeError, ValueError):
                result_json, tool_error = None, "tool result is not JSON-serializable"
            if result_json is not None:
                size = len(result_json.encode("utf-8", "surrogatepass"))
                if size > self.limits.max_result_bytes:
                    result_json = None
                    tool_error = RESULT_TOO_LARGE.format(size=size, limit=self.limits.max_result_bytes)
        else:
            result_json = None
            tool_error = str(tool_error if tool_error is not None else "tool failed")
        record = ToolRecord(pending.name, pending.input_sha256, waited_ms, ok=result_json is not None)
        state = replace(state, records=(*state.records, record), pending=None)
        if result_json is not None:
            source = resume_source(pending.seq, result_json=result_json)
        else:
            source = resume_source(pending.seq, error=str(tool_error))
        return self._slice(state, source, deadline_seconds, first=False)

    def expire(
        self,
        state: ToolCallState,
        *,
        now_ms: int | None = None,
        turn_ended: bool = False,
        stop_session: bool = True,
    ) -> Finished:
        """End a call whose tool result never came within the bound (or whose turn ended: `turn_ended`):
        stop the session unless told not to (`stop_session=False`: its turn's background jobs keep
        it, docs/jobs.md); the call's result is a SandboxTimeout with the output the code produced before
        it paused."""
        now = self._now_ms() if now_ms is None else now_ms
        records = state.records
        if state.pending is not None:
            waited = max(0, now - state.pending.paused_at_ms)
            records = (*records, ToolRecord(state.pending.name, state.pending.input_sha256, waited, ok=False))
        if stop_session:
            self.runner.stop_session(state.interpreter_id, state.session_id)
        seconds = int(self.limits.wait_seconds)
        message = TOOL_TURN_ENDED if turn_ended else TOOL_WAIT_EXPIRED.format(seconds=seconds)
        reason = naming.REASON_TOOL_TURN_ENDED if turn_ended else f"tool_wait_expired:{seconds}s"
        return self._finish(
            replace(state, records=records, pending=None),
            exit_status="timeout",
            exit_code=None,
            error=SandboxTimeout.__name__,
            message=message,
            reason=reason,
            session_stopped=stop_session,
        )

    def refuse(self, state: ToolCallState, failure: SandboxFailure, *, stop_session: bool = True) -> Finished:
        """End a paused call that may not go on (the kill switch, docs/circuit-breakers.md) with
        `failure` (its class, message and failure_reason): the answered tool call is recorded as not
        delivered, the session stopped unless told not to (its turn's background jobs keep it), the output
        so far kept."""
        records = state.records
        if state.pending is not None:
            waited = max(0, self._now_ms() - state.pending.paused_at_ms)
            records = (*records, ToolRecord(state.pending.name, state.pending.input_sha256, waited, ok=False))
        if stop_session:
            self.runner.stop_session(state.interpreter_id, state.session_id)
        return self._finish(
            replace(state, records=records, pending=None),
            exit_status=failure.exit_status,
            exit_code=None,
            error=failure.error,
            message=failure.message,
            reason=str(failure.fields.get("failure_reason") or failure.error),
            session_stopped=stop_session,
        )

    def abort(self, state: ToolCallState, *, reason: str, message: str) -> Finished:
        """End a paused call that cannot continue (e.g. its continuation could not be stored):
        stop the session so the parked code never runs on; SandboxError with the output so far."""
        self.runner.stop_session(state.interpreter_id, state.session_id)
        return self._finish(
            replace(state, pending=None),
            exit_status="error",
            exit_code=None,
            error=SandboxError.__name__,
            message=message,
            reason=reason,
            session_stopped=True,
        )

    # --- one slice ----------------------------------------------------------------------------
    def _slice(
        self, state: ToolCallState, source: str, deadline_seconds: float | None, *, first: bool
    ) -> Paused | Finished:
        runner = self.runner
        budget = runner.call_timeout_seconds - state.running_ms / 1000
        limit = budget if deadline_seconds is None else min(budget, deadline_seconds)
        limit = max(1.0, limit)
        accumulator = _MarkerAccumulator(runner.invoker.head_limit_bytes)
        call = runner.invoker.invoke(
            state.interpreter_id, state.session_id, source, timeout_seconds=limit, accumulator=accumulator
        )
        state = replace(state, running_ms=state.running_ms + call.duration_ms)
        if call.session_gone:
            if first:  # nothing ran: the caller starts a fresh session, as for ordinary code
                raise SessionGone(state.session_id, runner.output.reason(f"invoke_failed:{call.api_error}"))
            return self._finish(
                state,
                exit_status="error",
                exit_code=None,
                error=SandboxError.__name__,
                message=SESSION_LOST,
                reason=runner.output.reason(f"session_lost:{call.api_error}"),
                session_stopped=True,
            )
        outcome = call.outcome
        marker = accumulator.marker
        healthy = not call.timed_out and call.api_error is None and outcome.stream_error is None
        if marker is None and healthy:
            marker = self._status(state)
            if marker is not None:
                accumulator.uncount(marker, outcome)
        stdout, stderr = state.stdout, state.stderr
        stdout.extend(outcome.stdout)
        stderr.extend(outcome.stderr)
        if call.timed_out or not healthy or marker is None or marker.state != naming.STATUS_TOOL_CALL:
            return self._final(state, call, limit, marker)
        problem = self._check_call(state, marker)
        if problem is not None:
            runner.stop_session(state.interpreter_id, state.session_id)
            return self._finish(
                state,
                exit_status="error",
                exit_code=None,
                error=SandboxError.__name__,
                message=TOOL_PROTOCOL_BROKEN,
                reason=f"tool_protocol:{problem}",
                session_stopped=True,
            )
        assert marker.name is not None and marker.input_json is not None  # checked by _check_call
        pending = PendingCall(marker.seq, marker.name, sha256_hex(marker.input_json), self._now_ms())
        state = replace(state, pending=pending)
        tool_call = ToolCall(
            id=f"{state.call_ref}-{marker.seq}", name=marker.name, input=json.loads(marker.input_json)
        )
        return Paused(tool_call=tool_call, state=state)

    def _status(self, state: ToolCallState) -> RuntimeState | None:
        """The slice's marker did not arrive (output beyond what the interpreter returns): ask."""
        call = self.runner.invoker.invoke(
            state.interpreter_id,
            state.session_id,
            STATUS_SOURCE,
            timeout_seconds=min(READINESS_TIMEOUT_SECONDS, self.runner.call_timeout_seconds),
        )
        if call.timed_out or call.api_error is not None:
            return None
        return find_marker(call.outcome.stdout.head)

    def _check_call(self, state: ToolCallState, marker: RuntimeState) -> str | None:
        expected = len(state.records) + 1
        if marker.seq != expected:
            return f"sequence:{marker.seq}!={expected}"
        if marker.seq > self.limits.max_calls:
            return "call_limit"
        if marker.name not in state.allow:
            return "tool_not_allowed"
        raw = marker.input_json or ""
        if len(raw.encode("utf-8", "surrogatepass")) > self.limits.max_input_bytes:
            return "input_too_large"
        try:
            value = json.loads(raw)
        except ValueError:
            return "input_not_json"
        if not isinstance(value, dict):
            return "input_not_object"
        return None

    def _final(
        self, state: ToolCallState, call: Invocation, limit: float, marker: RuntimeState | None
    ) -> Finished:
        runner = self.runner
        outcome = call.outcome
        verdict = call.classify(
            int(runner.call_timeout_seconds if limit >= runner.call_timeout_seconds else limit)
        )
        if call.timed_out:
            runner.stop_session(state.interpreter_id, state.session_id)
            return self._finish_classified(state, verdict, exit_code=outcome.exit_code, session_stopped=True)
        if verdict.exit_status == "ok" and (marker is None or marker.state != STATE_DONE):
            # The driver ran without error but the runtime never said the code ended: it is
            # missing, busy with an earlier paused call, or was tampered with.
            busy = marker is not None and marker.state == STATE_BUSY
            if not busy:
                runner.stop_session(state.interpreter_id, state.session_id)
            what = "busy" if busy else ("no_state" if marker is None else marker.state)
            return self._finish(
                state,
                exit_status="error",
                exit_code=None,
                error=SandboxError.__name__,
                message=PREVIOUS_CALL_PAUSED if busy else TOOL_PROTOCOL_BROKEN,
                reason=f"tool_protocol:{what}",
                session_stopped=not busy,
            )
        return self._finish_classified(state, verdict, exit_code=outcome.exit_code, session_stopped=False)

    def _finish(
        self,
        state: ToolCallState,
        *,
        exit_status: str,
        exit_code: int | None,
        error: str | None,
        message: str | None,
        reason: str | None,
        session_stopped: bool,
    ) -> Finished:
        """The call's end: the output of every slice, redacted as one text (`Output.finish`)."""
        result = self.runner.output.finish(
            stdout=state.stdout,
            stderr=state.stderr,
            exit_status=exit_status,
            exit_code=exit_code,
            error=error,
            message=message,
            reason=reason,
            duration_ms=state.running_ms,
            session_stopped=session_stopped,
        )
        return Finished(result=result, tool_calls=len(state.records), records=state.records)

    def _finish_classified(
        self, state: ToolCallState, verdict: Classification, *, exit_code: int | None, session_stopped: bool
    ) -> Finished:
        result = self.runner.output.finish_classified(
            verdict,
            stdout=state.stdout,
            stderr=state.stderr,
            exit_code=exit_code,
            duration_ms=state.running_ms,
            session_stopped=session_stopped,
        )
        return Finished(result=result, tool_calls=len(state.records), records=state.records)
