"""execute_code behind Powertools idempotency (§4.4), keyed by (tenant_id, call_id).

`IdempotentCalls.run_once(request, context, run)` runs `run(request, time_left)` at most once per
key and returns the full response it produced — or, for a retry, the stored copy. Nothing travels
through thread-locals: the idempotent function returns the full response, and Powertools stores
the form an output serializer derives from it (`stored_form`), so the caller of the invocation
that ran the code always holds the real result.

Three things Powertools does not do for us:
- A retry must be *the same request*: the validation payload is the whole call (code, agent,
  turn, template, user, source), so a call_id reused by another agent, turn or user of the tenant
  is refused instead of being handed someone else's output.
- The stored result must fit a DynamoDB item (400 KB): it is stored compressed, and if even that
  is too big, trimmed (flagged `replay_output_trimmed`) — only replays see the trimmed copy.
- A failure to *save* the result happens after the code ran (its audit row is on its way beside
  the save, see `parallel.Pending`): the persistence layer below logs and counts it instead of
  raising, so the caller still gets the real result and no second audit row is written (a retry
  finds the record in progress until it expires).
"""

from __future__ import annotations

import base64
import json
import time
import zlib
from collections.abc import Callable
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

from sandbox_common import messages
from sandbox_common.errors import SandboxInvalidRequest
from sandbox_common.models import ExecuteCodeRequest
from sandbox_common.observability import logger
from sandbox_common.outcome import internal_failure
from sandbox_common.redaction.catalogue import redact_head

STORED_LIMIT_BYTES = 300_000  # well under DynamoDB's 400 KB item limit, with room for attributes
_TRIM_STDOUT_CHARS, _TRIM_STDERR_CHARS = 64 * 1024, 16 * 1024
VALIDATION_JMESPATH = "[code, agent_id, turn_id, template_id, user_id, invocation_source]"
KEY_JMESPATH = "[tenant_id, call_id]"
KEY_PREFIX = "execute_code"
RECORD_TTL_SECONDS = 24 * 3600
_IN_PROGRESS_POLL_SECONDS = 0.25
_ANSWER_MARGIN_SECONDS = 5

TimeLeft = Callable[[], float] | None  # seconds the Lambda has left (None outside Lambda)
Run = Callable[[ExecuteCodeRequest, TimeLeft], dict[str, Any]]


class StillRunning(Exception):
    """A retry waited as long as it may for its racing original; the original audits the call."""


class IdempotencyStoreUnavailable(Exception):
    """The store could not claim the call: nothing ran (running could run it twice)."""


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


@lru_cache(maxsize=1)
def _powertools() -> Any:
    """Powertools idempotency, imported on first use: its package imports boto3, which a cold
    start must not pay before the first call (tests/benchmarks/test_cold_import.py)."""
    from aws_lambda_powertools.utilities import idempotency as pt
    from aws_lambda_powertools.utilities.idempotency import exceptions
    from aws_lambda_powertools.utilities.idempotency.serialization.custom_dict import CustomDictSerializer

    class ResultKeepingStore(pt.DynamoDBPersistenceLayer):
        """Saving the result is the last step of a call that ran (its audit row goes out beside
        it): a failure there is logged and alarmed, never raised (raising would lose the real
        result)."""

        def save_success(self, data: dict[str, Any], result: dict) -> None:
            try:
                super().save_success(data, result)
            except Exception as exc:  # noqa: BLE001 — any store failure: the caller keeps its result
                logger.error("idempotency_save_failed", extra={"cause": redact_head(str(exc), 200)})
                internal_failure("idempotency_store_unavailable:save")

    return SimpleNamespace(
        Config=pt.IdempotencyConfig, Store=ResultKeepingStore, idempotent_function=pt.idempotent_function,
        Serializer=CustomDictSerializer, InProgress=exceptions.IdempotencyAlreadyInProgressError,
        PersistenceError=exceptions.IdempotencyPersistenceLayerError,
        ValidationError=exceptions.IdempotencyValidationError,
    )  # fmt: skip


def _execute(request: dict[str, Any], run: Run, time_left: TimeLeft) -> dict[str, Any]:
    return run(ExecuteCodeRequest.model_validate(request), time_left)


def time_left_of(context: Any) -> TimeLeft:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return (lambda: remaining() / 1000) if callable(remaining) else None


class IdempotentCalls:
    def __init__(self, *, table_name: str, ddb: Any) -> None:
        self.pt = pt = _powertools()
        self.config = pt.Config(
            event_key_jmespath=KEY_JMESPATH,
            payload_validation_jmespath=VALIDATION_JMESPATH,
            raise_on_no_idempotency_key=True,
            expires_after_seconds=RECORD_TTL_SECONDS,
        )
        self.store = pt.Store(table_name=table_name, boto3_client=ddb)
        self._execute = pt.idempotent_function(
            _execute, data_keyword_argument="request", persistence_store=self.store, config=self.config,
            key_prefix=KEY_PREFIX, output_serializer=pt.Serializer(to_dict=stored_form, from_dict=unpack),
        )  # fmt: skip

    def run_once(self, request: ExecuteCodeRequest, context: Any, run: Run, *, max_wait_seconds: float) -> dict[str, Any]:
        """The call's response: run here, or replayed. Raises SandboxInvalidRequest (call_id reused
        for another request), StillRunning, or IdempotencyStoreUnavailable (nothing ran)."""
        self.config.register_lambda_context(context)
        time_left = time_left_of(context)
        # Wait for a racing original at most as long as it can run, and never past our own Lambda
        # deadline (answering beats being killed by the runtime with no answer at all).
        wait = max_wait_seconds
        if time_left is not None:
            wait = min(wait, max(0.0, time_left() - _ANSWER_MARGIN_SECONDS))
        deadline = time.monotonic() + wait
        payload = request.model_dump()
        while True:
            try:
                return dict(self._execute(request=payload, run=run, time_left=time_left))
            except self.pt.ValidationError:
                raise SandboxInvalidRequest(messages.CALL_ID_REUSED) from None
            except self.pt.InProgress:
                # A retry racing its original: wait for the original's result rather than run twice.
                if time.monotonic() > deadline:
                    raise StillRunning from None
                time.sleep(_IN_PROGRESS_POLL_SECONDS)
            except self.pt.PersistenceError as exc:
                # Without the idempotency store a retry could run twice: fail closed.
                logger.error("idempotency_store_unavailable", extra={"cause": redact_head(str(exc), 200)})
                raise IdempotencyStoreUnavailable(redact_head(str(exc), 200)) from None
