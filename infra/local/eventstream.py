"""Encoder for the AWS event-stream wire format (application/vnd.amazon.eventstream).

Used by the local AgentCore interpreter to answer InvokeCodeInterpreter exactly as AWS does, and
by tests to feed *real* frames through botocore's own parser (a hand-made dict would skip the
parser that the peer system got wrong). Frame layout, per the AWS event-stream spec:

    [total length u32][headers length u32][prelude CRC32 u32][headers][payload][message CRC32 u32]

Each header: [name length u8][name][type u8 (7 = string)][value length u16][value].
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

_STRING = 7


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode("utf-8"), value.encode("utf-8")
    return (
        struct.pack(">B", len(raw_name)) + raw_name + struct.pack(">BH", _STRING, len(raw_value)) + raw_value
    )


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    raw_headers = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(raw_headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(raw_headers))
    prelude += struct.pack(">I", zlib.crc32(prelude) & 0xFFFFFFFF)
    body = prelude + raw_headers + payload
    return body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def event_payload_head(event_type: str, payload_length: int) -> tuple[bytes, int]:
    """The start of an event whose payload is written after it, piece by piece: (its prelude and
    headers, the whole message's length). The message CRC runs over the head and every payload
    piece (`zlib.crc32(piece, crc)`) and ends the message as 4 big-endian bytes."""
    raw_headers = b"".join(
        _header(k, v)
        for k, v in {
            ":message-type": "event",
            ":event-type": event_type,
            ":content-type": "application/json",
        }.items()
    )
    total = 12 + len(raw_headers) + payload_length + 4
    prelude = struct.pack(">II", total, len(raw_headers))
    prelude += struct.pack(">I", zlib.crc32(prelude) & 0xFFFFFFFF)
    return prelude + raw_headers, total


def event_frame(event_type: str, body: dict[str, Any]) -> bytes:
    """An event member of the stream, e.g. event_frame("result", {"content": [...], ...})."""
    return event_payload_frame(event_type, json.dumps(body).encode("utf-8"))


def event_payload_frame(event_type: str, payload: bytes) -> bytes:
    """An event member whose JSON payload is already encoded."""
    return encode_message(
        {":message-type": "event", ":event-type": event_type, ":content-type": "application/json"}, payload
    )


def exception_frame(exception_type: str, message: str) -> bytes:
    """A modeled exception inside the stream, e.g. exception_frame("throttlingException", "slow down").

    botocore raises these as EventStreamError while the caller iterates the stream.
    """
    return encode_message(
        {
            ":message-type": "exception",
            ":exception-type": exception_type,
            ":content-type": "application/json",
        },
        json.dumps({"message": message}).encode("utf-8"),
    )


def result_frame(
    *,
    stdout: str | None = None,
    stderr: str | None = None,
    exit_code: int | None = None,
    is_error: bool = False,
    text: list[str] | None = None,
    structured: bool = True,
    task_status: str = "completed",
    execution_time_ms: float = 1.0,
) -> bytes:
    """One `result` event as AgentCore sends it: text content blocks and/or structuredContent."""
    body: dict[str, Any] = {
        "content": [{"type": "text", "text": t} for t in (text or [])],
        "isError": is_error,
    }
    if structured:
        sc: dict[str, Any] = {"taskStatus": task_status, "executionTime": execution_time_ms}
        if stdout is not None:
            sc["stdout"] = stdout
        if stderr is not None:
            sc["stderr"] = stderr
        if exit_code is not None:
            sc["exitCode"] = exit_code
        body["structuredContent"] = sc
    return event_frame("result", body)


# The exception members of CodeInterpreterStreamOutput in the botocore model.
STREAM_EXCEPTION_TYPES: tuple[str, ...] = (
    "accessDeniedException",
    "conflictException",
    "internalServerException",
    "resourceNotFoundException",
    "serviceQuotaExceededException",
    "throttlingException",
    "validationException",
)
