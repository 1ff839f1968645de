"""execute_code behind Powertools idempotency (§4.4), keyed by (tenant_id, call_id).

Three things Powertools does not do for us:
- A retry must be *the same request*: the validation payload is the whole call (code, agent,
  turn, template, user, source), so a call_id reused by another agent, turn or user of the tenant
  is refused instead of being handed someone else's output.
- The stored result must fit a DynamoDB item (400 KB): it is stored compressed, and if even that
  is too big, trimmed (flagged `replay_output_trimmed`) — only replays see the trimmed copy.
- A failure to *save* the result happens after the code ran and was audited: the caller still
  gets the real result (kept per invocation), never a second audit row.
"""

from __future__ import annotations

import base64
import json
import threading
import zlib
from functools import lru_cache
from typing import Any

from sandbox_common import aws
from sandbox_common.settings import dispatch_settings

STORED_LIMIT_BYTES = 300_000  # well under DynamoDB's 400 KB item limit, with room for attributes
_TRIM_STDOUT_CHARS, _TRIM_STDERR_CHARS = 64 * 1024, 16 * 1024
VALIDATION_JMESPATH = "[code, agent_id, turn_id, template_id, user_id, invocation_source]"

_ran_here = threading.local()  # the full response of a call whose code ran in this invocation


def _pack(response: dict[str, Any]) -> dict[str, Any]:
    raw = json.dumps(response, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return {"z": base64.b64encode(zlib.compress(raw, 6)).decode("ascii")}


def stored_form(response: dict[str, Any]) -> dict[str, Any]:
    packed = _pack(response)
    if len(packed["z"]) <= STORED_LIMIT_BYTES:
        return packed
    trimmed = {**response, "stdout": str(response.get("stdout", ""))[:_TRIM_STDOUT_CHARS],
               "stderr": str(response.get("stderr", ""))[:_TRIM_STDERR_CHARS], "replay_output_trimmed": True}  # fmt: skip
    return _pack(trimmed)


def unpack(stored: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(zlib.decompress(base64.b64decode(stored["z"]))))


def begin(context: Any = None) -> None:
    _ran_here.response = None
    _ran_here.time_left = _time_left_of(context)


def _time_left_of(context: Any) -> Any:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return (lambda: remaining() / 1000) if callable(remaining) else None


def result_of_this_invocation() -> dict[str, Any] | None:
    return getattr(_ran_here, "response", None)


@lru_cache(maxsize=1)
def executor() -> Any:
    """(config, execute): `execute(request=<dict>)` returns the stored form."""
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent_function,
    )

    from .dependencies import dispatcher

    settings = dispatch_settings()
    store = DynamoDBPersistenceLayer(table_name=settings.idempotency_table, boto3_client=aws.client("dynamodb"))
    config = IdempotencyConfig(
        event_key_jmespath="[tenant_id, call_id]",
        payload_validation_jmespath=VALIDATION_JMESPATH,
        raise_on_no_idempotency_key=True,
        expires_after_seconds=24 * 3600,
    )

    @idempotent_function(data_keyword_argument="request", persistence_store=store, config=config,
                         key_prefix="execute_code")  # fmt: skip
    def execute(request: dict) -> dict:
        from sandbox_common.models import ExecuteCodeRequest

        response = dispatcher().execute_code(ExecuteCodeRequest.model_validate(request),
                                             time_left=getattr(_ran_here, "time_left", None))  # fmt: skip
        _ran_here.response = response
        return stored_form(response)

    return config, execute
