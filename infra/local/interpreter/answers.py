"""A worker's answer to one tool call, read under bounds and checked before anything of it is
trusted: its JSON part, then its raw part (output blocks, or a file tool's content blocks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infra.local.interpreter.isolation import Limits
from infra.local.interpreter.worker import frames


@dataclass
class InvokeOutcome:
    """What one tool call produced; `died` means the worker process ended during the call."""

    stdout: str
    stderr: str
    exit_code: int | None
    execution_time: float  # seconds
    content: list[dict[str, Any]] | None = None
    content_blocks: list[bytes] | None = None  # file tools: each content block as the worker encoded it
    is_error: bool | None = None
    died: bool = False
    stdout_bytes: int | None = None  # exact bytes the code wrote, also beyond what was kept
    stderr_bytes: int | None = None
    task_id: str | None = None  # startCommandExecution / getTask / stopTask
    task_status: str | None = None
    streamed: bool = False  # the content blocks were streamed to the caller (`on_blocks`)
    raw_length: int = 0  # the answer's raw part, in bytes (file tools: their content blocks)


# Answers whose raw part is output: stdout and stderr blocks, each within what the worker keeps.
OUTPUT_OPS = ("executeCode", "executeCommand", "startCommandExecution", "getTask", "stopTask")
# Answers whose raw part is content blocks (one per file or entry): streamed when large.
BLOCK_OPS = ("readFiles", "listFiles")
SMALL_RAW = 64 * 1024  # a file tool's blocks up to this size are read whole and sent as one event
_LIST_BLOCK = 64 * 1024  # one listFiles entry (its name is at most 255 bytes)
TASK_STATUSES = ("submitted", "working", "completed", "canceled", "failed")


class ProtocolViolation(Exception):
    """The worker's answer broke the protocol or its bounds; the session has been ended."""


class ClientGone(Exception):
    """The caller went away while file contents were streamed to it."""


Blocks = list[bytes]
BlockSink = Callable[[InvokeOutcome, frames.Frame], None]


def block_bound(op: str) -> int:
    return frames.MAX_BLOCK if op == "readFiles" else _LIST_BLOCK


def small_blocks(op: str, frame: frames.Frame) -> Blocks:
    blocks: Blocks = []
    while (length := frame.next_block(block_bound(op))) is not None:
        blocks.append(frame.read(length))
    return blocks


def read_answer(op: str, frame: frames.Frame, seq: int, limits: Limits) -> InvokeOutcome:
    """The worker's answer, checked: anything malformed is a ProtocolError, and so is an
    answer to another request than this one (`seq`): a frame user code left in the channel
    would otherwise answer this call, and the worker's own answer the next one."""
    obj = frame.obj
    if obj.get("seq") != seq or isinstance(obj.get("seq"), bool):
        raise frames.ProtocolError(f"an answer to request {obj.get('seq')!r}, not to {seq}")
    try:
        exit_code = obj.get("exit_code")
        if exit_code is not None and (not isinstance(exit_code, int) or isinstance(exit_code, bool)):
            raise TypeError("exit_code")
        execution_time = float(obj.get("execution_time", 0.0))
        counts = [obj.get(k) for k in ("stdout_bytes", "stderr_bytes")]
        if not all(c is None or (isinstance(c, int) and c >= 0) for c in counts):
            raise TypeError("byte counts")
        content = obj.get("content")
        if content is not None and not (
            isinstance(content, list) and all(isinstance(c, dict) for c in content)
        ):
            raise TypeError("content")
        task_status = obj.get("task_status")
        if task_status is not None and task_status not in TASK_STATUSES:
            raise ValueError("task_status")
        task_id = obj.get("task_id")
        if task_id is not None and not (isinstance(task_id, str) and len(task_id) <= 64):
            raise TypeError("task_id")
    except (TypeError, ValueError) as exc:
        raise frames.ProtocolError(f"malformed answer ({exc})") from exc
    outcome = InvokeOutcome(
        stdout="",
        stderr="",
        exit_code=exit_code,
        execution_time=execution_time,
        content=content,
        is_error=obj.get("is_error") if isinstance(obj.get("is_error"), bool) else None,
        died=obj.get("fatal") is True,
        stdout_bytes=counts[0],
        stderr_bytes=counts[1],
        task_id=task_id,
        task_status=task_status,
        raw_length=frame.raw_length,
    )
    if op in OUTPUT_OPS:
        kept = [limits.stdout_kept, limits.stderr_kept]
        if frame.raw_length > sum(kept) + 2 * frames.BLOCK_HEADER:
            raise frames.ProtocolError(f"an answer of {frame.raw_length} raw bytes exceeds the output bounds")
        blocks = frame.blocks(kept)
        outcome.stdout, outcome.stderr = (
            (blocks[i] if i < len(blocks) else b"").decode("utf-8", errors="replace") for i in (0, 1)
        )
    elif op not in BLOCK_OPS and frame.raw_length:
        raise frames.ProtocolError(f"{op} answers carry no raw part")
    return outcome
