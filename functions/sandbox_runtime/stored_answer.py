"""The stored form of a call's answer on its idempotency record: what a retry replays, written by
dispatch's completion and by whoever finishes an interrupted call (`interrupted`).

The answer must fit a DynamoDB item (400 KB): it is stored compressed, and if even that is too
big, trimmed (flagged `replay_output_trimmed`) — only replays see the trimmed copy.
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

STORED_LIMIT_BYTES = 300_000  # well under DynamoDB's 400 KB item limit, with room for attributes
_TRIM_STDOUT_CHARS, _TRIM_STDERR_CHARS = 64 * 1024, 16 * 1024


def _pack(response: dict[str, Any]) -> dict[str, Any]:
    raw = json.dumps(response, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return {"z": base64.b64encode(zlib.compress(raw, 6)).decode("ascii")}


def stored_form(response: dict[str, Any]) -> dict[str, Any]:
    packed = _pack(response)
    if len(packed["z"]) <= STORED_LIMIT_BYTES:
        return packed
    trimmed = {
        **response,
        "stdout": str(response.get("stdout", ""))[:_TRIM_STDOUT_CHARS],
        "stderr": str(response.get("stderr", ""))[:_TRIM_STDERR_CHARS],
        "replay_output_trimmed": True,
    }
    return _pack(trimmed)


def unpack(stored: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(zlib.decompress(base64.b64decode(stored["z"]))))
