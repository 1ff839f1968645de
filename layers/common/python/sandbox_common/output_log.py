"""Full (redacted) output to CloudWatch Logs as structured events keyed by invocation and
session, chunked well under the 256 KiB event limit even after JSON escaping."""

from __future__ import annotations

from sandbox_common.observability import logger

CHUNK_CHARS = 32 * 1024  # ≤ 6 bytes per char once JSON-escaped: < 200 KiB per event


def log_output(*, invocation_id: str, session_id: str | None, tenant_id: str, stream: str, text: str) -> int:
    """Returns the number of events written (0 for empty output)."""
    if not text:
        return 0
    chunks = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)]
    for index, data in enumerate(chunks):
        logger.info(
            "sandbox_output",
            extra={
                "invocation_id": invocation_id,
                "session_id": session_id,
                "tenant_id": tenant_id,
                "stream": stream,
                "chunk": index,
                "chunks": len(chunks),
                "data": data,
            },
        )
    return len(chunks)
