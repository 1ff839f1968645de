"""Parsing the InvokeCodeInterpreter event stream.

Each event is `{"result": {"content": [...], "structuredContent": {...}, "isError": bool}}` or a
modeled exception, which botocore raises as `EventStreamError` while the stream is iterated.

Rules, each a lesson from the peer system:
- the structuredContent of the last event that carries one is authoritative;
- text content blocks are only a fallback for when no structured content arrived at all, so
  text that precedes the structured event is never counted twice;
- an exception event is a failure, never an empty success; a stream with no result is an error;
- memory is bounded: each stream keeps a head of `limit_bytes` plus a short tail (the tail is
  where the last exception of a traceback is), while the true raw byte total is still counted.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

TAIL_CHARS = 8192
# A stream that cannot be read as events at all (e.g. an event nested deeper than the JSON parser
# goes: RecursionError), unlike a modeled exception event: nothing the session sends on that
# channel is trusted again, so the runner stops the session (SessionRunner.execute).
PROTOCOL_ERROR = "protocolError"


class BoundedText:
    """A text stream kept as head (≤ limit bytes) + tail (last TAIL_CHARS chars) + raw byte count."""

    __slots__ = ("limit_bytes", "_head", "_tail", "total_bytes")

    def __init__(self, limit_bytes: int, *, head: bytes = b"", tail: str = "", total_bytes: int = 0) -> None:
        """`head`, `tail`, `total_bytes`: a stream kept before (a paused tool-calling call keeps its
        output between slices); cut to the limits."""
        self.limit_bytes = limit_bytes
        self._head = bytearray(head[:limit_bytes])
        self._tail = tail[-TAIL_CHARS:]
        self.total_bytes = int(total_bytes)

    def append(self, text: str) -> None:
        if not text:
            return
        raw = text.encode("utf-8", "surrogatepass")
        self.total_bytes += len(raw)
        room = self.limit_bytes - len(self._head)
        if room > 0:
            self._head += raw[:room]
        self._tail = (self._tail + text)[-TAIL_CHARS:]

    @classmethod
    def of(cls, text: str, limit_bytes: int) -> BoundedText:
        bounded = cls(limit_bytes)
        bounded.append(text)
        return bounded

    @classmethod
    def restore(cls, head: bytes, tail: str, total_bytes: int, limit_bytes: int) -> BoundedText:
        """A BoundedText from its parts (a paused tool-calling call keeps its output between slices)."""
        return cls(limit_bytes, head=head, tail=tail, total_bytes=total_bytes)

    def extend(self, other: BoundedText) -> None:
        """Append another stream's text: head, tail and count as if it had been appended here."""
        if other.total_bytes == 0:
            return
        room = self.limit_bytes - len(self._head)
        if room > 0 and self.complete:
            self._head += other.head_bytes[:room]
        self._tail = (self._tail + other.tail)[-TAIL_CHARS:]
        self.total_bytes += other.total_bytes

    @property
    def head_bytes(self) -> bytes:
        return bytes(self._head)

    @property
    def head(self) -> str:
        """The kept prefix, decoded; a character cut by the byte limit is dropped, not mangled."""
        return bytes(self._head).decode("utf-8", "ignore")

    @property
    def tail(self) -> str:
        return self._tail

    @property
    def held_bytes(self) -> int:
        return len(self._head)

    @property
    def complete(self) -> bool:
        return self.total_bytes <= self.limit_bytes


@dataclass(frozen=True)
class StreamOutcome:
    stdout: BoundedText
    stderr: BoundedText
    exit_code: int | None
    is_error: bool
    result_events: int
    structured: bool
    task_status: str | None
    stream_error: str | None  # exception code, e.g. "throttlingException"
    stream_error_message: str | None


class StreamAccumulator:
    """Folds events into a bounded outcome. Fed by the reader thread, read by the runner (which
    may take a partial snapshot when the deadline passes), hence the lock."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._lock = threading.Lock()
        self._text_stdout = BoundedText(limit_bytes)
        self._text_stderr = BoundedText(limit_bytes)
        self._structured: tuple[BoundedText, BoundedText, int | None, str | None] | None = None
        self._is_error = False
        self._result_events = 0
        self._stream_error: tuple[str, str] | None = None
        self._exact: tuple[int, int] | None = None

    def count_exactly(self, stdout_bytes: int, stderr_bytes: int) -> None:
        """The interpreter's own count of the bytes the code wrote (the local interpreter sends it,
        it keeps only a head of each stream); authoritative over the structured text."""
        with self._lock:
            self._exact = (stdout_bytes, stderr_bytes)

    def feed(self, event: dict[str, Any]) -> None:
        result = event.get("result")
        if not isinstance(result, dict):
            return  # an unknown member added to the stream later: ignore, don't guess
        structured = result.get("structuredContent")
        with self._lock:
            self._result_events += 1
            self._is_error = self._is_error or bool(result.get("isError"))
            if isinstance(structured, dict):
                exit_code = structured.get("exitCode")
                self._structured = (
                    BoundedText.of(str(structured.get("stdout") or ""), self.limit_bytes),
                    BoundedText.of(str(structured.get("stderr") or ""), self.limit_bytes),
                    exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None,
                    structured.get("taskStatus"),
                )
            elif self._structured is None:
                # Fallback only; discarded as soon as any structured content arrives. Error
                # results carry the error text, which belongs on stderr.
                sink = self._text_stderr if result.get("isError") else self._text_stdout
                for block in result.get("content") or ():
                    if isinstance(block, dict) and block.get("type") == "text":
                        sink.append(str(block.get("text") or ""))

    def fail(self, code: str, message: str) -> None:
        with self._lock:
            if self._stream_error is None:
                self._stream_error = (code or "unknownException", message or "")

    def snapshot(self) -> StreamOutcome:
        with self._lock:
            if self._structured is not None:
                stdout, stderr, exit_code, task_status = self._structured
                if self._exact is not None:
                    stdout.total_bytes, stderr.total_bytes = self._exact
            else:
                stdout, stderr, exit_code, task_status = self._text_stdout, self._text_stderr, None, None
            code, message = self._stream_error or (None, None)
            return StreamOutcome(
                stdout=stdout,
                stderr=stderr,
                exit_code=exit_code,
                is_error=self._is_error,
                result_events=self._result_events,
                structured=self._structured is not None,
                task_status=task_status,
                stream_error=code,
                stream_error_message=message,
            )


def consume(stream: Any, accumulator: StreamAccumulator, *, cancelled: threading.Event) -> None:
    """Iterate a botocore EventStream into the accumulator; exception events become `fail`, and
    so does a stream that cannot be parsed (PROTOCOL_ERROR)."""
    from botocore.eventstream import ParserError
    from botocore.exceptions import EventStreamError
    from botocore.parsers import ResponseParserError

    try:
        for event in stream:
            accumulator.feed(event)
            if cancelled.is_set():
                return
    except EventStreamError as exc:
        error = exc.response.get("Error", {}) if isinstance(exc.response, dict) else {}
        accumulator.fail(str(error.get("Code") or "unknownException"), str(error.get("Message") or ""))
    except (RecursionError, ValueError, ParserError, ResponseParserError) as exc:
        accumulator.fail(PROTOCOL_ERROR, type(exc).__name__)
