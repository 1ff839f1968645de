"""The `bedrock-agentcore` data plane as this server answers it, apart from the HTTP plumbing: the
tools and their arguments' checks, the errors (`ApiError`, the control plane's refusal), and the
`result` events of one tool call (server.py's docstring has the sources)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from infra.local.eventstream import event_frame, event_payload_frame
from infra.local.interpreter.answers import InvokeOutcome

EVENTSTREAM = "application/vnd.amazon.eventstream"
SESSION_HEADER = "x-amzn-code-interpreter-session-id"
CHUNK_CHARS = 64 * 1024  # text per content-only event when output is long
MAX_BODY = 128 * 1024 * 1024
SESSION_ID_RE = re.compile(r"^[0-9a-zA-Z]{1,40}$")
# executeCode's languages (the model's enum) and the one runtime each runs with here (AgentCore also
# offers deno for JavaScript and TypeScript).
PYTHON = "python"
LANGUAGES = (PYTHON, "javascript", "typescript")
RUNTIMES = {PYTHON: "python", "javascript": "nodejs", "typescript": "nodejs"}
# ToolName enum of the model; the local worker implements every one.
TOOLS = (
    "executeCode",
    "executeCommand",
    "readFiles",
    "listFiles",
    "removeFiles",
    "writeFiles",
    "startCommandExecution",
    "getTask",
    "stopTask",
)


class ApiError(Exception):
    def __init__(self, status: int, error_type: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.error_type, self.message, self.extra = status, error_type, message, extra


# The control plane (`bedrock-agentcore-control`, which boto3 reaches here when the local stack's
# environment is exported): by (method, path parts), the operations AgentCore offers and this
# interpreter does not, since its interpreters are the stage's, created by `sandboxctl local up`.
CONTROL_PLANE = {
    ("PUT", 1): "CreateCodeInterpreter",
    ("POST", 1): "ListCodeInterpreters",
    ("GET", 2): "GetCodeInterpreter",
    ("DELETE", 2): "DeleteCodeInterpreter",
}
UNSUPPORTED = "UnsupportedOperationException"


def unsupported(operation: str) -> ApiError:
    """A control-plane call the local stack does not offer: a JSON error botocore parses into a
    ClientError (code UnsupportedOperationException), saying what the local stack offers instead."""
    return ApiError(
        400,
        UNSUPPORTED,
        f"{operation} is not offered by the local AgentCore Code Interpreter of the local stack "
        "(sandboxctl local up): its code interpreters are the ones the local stage declares, created when "
        "the stack starts, plus the SDK's default aws.codeinterpreter.v1. Sessions and their tools work "
        "as on AgentCore: StartCodeInterpreterSession, InvokeCodeInterpreter, StopCodeInterpreterSession, "
        "GetCodeInterpreterSession, ListCodeInterpreterSessions.",
    )


def not_found(message: str) -> ApiError:
    return ApiError(404, "ResourceNotFoundException", message)


def validation(message: str, field: str | None = None, reason: str = "FieldValidationFailed") -> ApiError:
    extra: dict[str, Any] = {"reason": reason}
    if field:
        extra["fieldList"] = [{"name": field, "message": message}]
    return ApiError(400, "ValidationException", message, **extra)


def iso(ts: datetime) -> str:
    return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    raise TypeError(type(value).__name__)


def structured_content(outcome: InvokeOutcome) -> dict[str, Any]:
    """ToolResultStructuredContent of an answer (API reference: executionTime in milliseconds)."""
    failed = outcome_failed(outcome)
    structured: dict[str, Any] = {
        "stdout": outcome.stdout,
        "stderr": outcome.stderr,
        "taskStatus": outcome.task_status or ("failed" if failed else "completed"),
        "executionTime": round(outcome.execution_time * 1000, 3),
    }
    if outcome.exit_code is not None:
        structured["exitCode"] = outcome.exit_code
    if outcome.task_id is not None:
        structured["taskId"] = outcome.task_id
    return structured


def outcome_failed(outcome: InvokeOutcome) -> bool:
    if outcome.is_error is not None:
        return outcome.is_error
    return outcome.exit_code not in (0, None)


def result_events(outcome: InvokeOutcome) -> list[bytes]:
    """The `result` events for one tool call, terminal (structured) event last. A file tool's
    content blocks (`content_blocks`, as the worker encoded them) are sent unparsed."""
    failed = outcome_failed(outcome)
    structured = structured_content(outcome)
    if outcome.content_blocks is not None:
        blocks = outcome.content_blocks
        flag = b"true" if failed else b"false"
        tail = json.dumps({"structuredContent": structured, "isError": failed}).encode("utf-8")
        if sum(len(b) for b in blocks) <= CHUNK_CHARS:  # short: one event, like short output
            return [event_payload_frame("result", b'{"content": [' + b", ".join(blocks) + b"], " + tail[1:])]
        # Long: one content-only event per block (a file each), then the terminal event, as long
        # executeCode output is streamed: each event stays the size of one file, and botocore's
        # event-stream buffer copies its whole pending message on every 64 KiB read (quadratic).
        events = [
            event_payload_frame("result", b'{"content": [' + block + b'], "isError": ' + flag + b"}")
            for block in blocks
        ]
        events.append(event_payload_frame("result", b'{"content": [], ' + tail[1:]))
        return events
    if outcome.content is not None:  # file tools: their own blocks, one event
        return [
            event_frame(
                "result", {"content": outcome.content, "structuredContent": structured, "isError": failed}
            )
        ]
    texts = [t for t in (outcome.stdout, outcome.stderr) if t]
    if sum(len(t) for t in texts) <= CHUNK_CHARS:
        blocks_ = [{"type": "text", "text": t} for t in texts]
        return [
            event_frame("result", {"content": blocks_, "structuredContent": structured, "isError": failed})
        ]
    events = [
        event_frame(
            "result", {"content": [{"type": "text", "text": t[i : i + CHUNK_CHARS]}], "isError": failed}
        )
        for t in texts
        for i in range(0, len(t), CHUNK_CHARS)
    ]
    events.append(event_frame("result", {"content": [], "structuredContent": structured, "isError": failed}))
    return events


def validate_arguments(name: str, arguments: dict[str, Any]) -> None:
    def need(key: str, kind: type) -> None:
        if not isinstance(arguments.get(key), kind):
            raise validation(f"arguments.{key} is required for {name}", f"arguments.{key}")

    if name == "executeCode":
        need("code", str)
        language = arguments.get("language", PYTHON)
        if language not in LANGUAGES:
            raise validation(
                f"arguments.language must be one of {', '.join(LANGUAGES)}", "arguments.language"
            )
        runtime = arguments.get("runtime")
        if runtime is not None and runtime != RUNTIMES[language]:
            runs = f"the local interpreter runs {language} with runtime {RUNTIMES[language]} only"
            raise validation(f"{runs}, not {runtime!r}", "arguments.runtime")
    elif name in ("executeCommand", "startCommandExecution"):
        need("command", str)
    elif name in ("getTask", "stopTask"):
        need("taskId", str)
    elif name == "writeFiles":
        need("content", list)
        for item in arguments["content"]:
            if not isinstance(item, dict) or not isinstance(item.get("path"), str):
                raise validation("each content item needs a path", "arguments.content")
    elif name in ("readFiles", "removeFiles"):
        need("paths", list)
