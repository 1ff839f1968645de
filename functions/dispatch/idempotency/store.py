"""execute_code behind Powertools idempotency, keyed by (tenant_id, call_id): the claim, the
completion that carries the call's audit row, and the finish of a call whose dispatch died.

`IdempotentCalls.run_once(request, context, run)` runs `run(time_left)` at most once per
key and returns the full response it produced — or, for a retry, the stored copy. Nothing travels
through thread-locals: the idempotent function returns the full response, and Powertools stores
the form an output serializer derives from it (`stored_form`), so the caller of the invocation
that ran the code always holds the real result.

What Powertools does not do for us:
- A retry must be *the same request*: the validation payload is the whole call (code, agent,
  turn, template, user, source), so a call_id reused by another agent, turn or user of the tenant
  is refused instead of being handed someone else's output.
- The stored result must fit a DynamoDB item: `sandbox_runtime.stored_answer` compresses it, and
  trims it (flagged `replay_output_trimmed`) if even that is too big.
- A dead dispatch must end with exactly one audit row (`sandbox_runtime.interrupted`): the claim
  carries the call's audit identity and the keys of a sparse index of open calls; an in-progress
  record past its deadline is never claimed again (Powertools would run the code a second time),
  it is finished as `dispatch_interrupted` by the first retry or the reaper's sweep.
- The completion and the call's audit row are ONE write (`CompletionRows`): the row is handed to
  the store, which sends the completed record and the row in one TransactWriteItems. A dispatch
  killed between two separate writes could leave a completed record with no row (nothing would
  ever write it: a completed record is not interrupted); now both land or neither (then the
  record stays in progress and the call is finished as interrupted, with its one row). If a
  finisher of an interrupted call already took the record, neither lands and the finisher's row
  is the call's one row.
- A failure to *save* the result happens after the code ran: the persistence layer below logs and
  counts it instead of raising, so the caller still gets the real result, and the row the
  transaction did not carry is written on its own (retries, dead-letter queue) — still one row.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency import exceptions as pt_errors
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import DataRecord
from aws_lambda_powertools.utilities.idempotency.serialization.custom_dict import CustomDictSerializer
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError
from sandbox_common import messages
from sandbox_common import naming as n
from sandbox_common.attempts import deadline_key
from sandbox_common.audit import AuditWriter
from sandbox_common.errors import SandboxInvalidRequest, StillRunning
from sandbox_common.models import ExecuteCodeRequest
from sandbox_common.observability import logger
from sandbox_common.outcome import internal_failure
from sandbox_common.redaction.catalogue import redact_head
from sandbox_runtime.interrupted import ATTR_ID, STATUS_COMPLETED, STATUS_INPROGRESS, InterruptedCalls
from sandbox_runtime.stored_answer import stored_form, unpack

VALIDATION_JMESPATH = "[code, language, agent_id, turn_id, template_id, user_id, invocation_source]"
KEY_JMESPATH = "[tenant_id, call_id]"
KEY_PREFIX = str(n.Action.EXECUTE_CODE)
# The payload key carrying the attempt's audit identity into the claim (outside both JMESPaths).
ATTEMPT_KEY = "_attempt"
RECORD_TTL_SECONDS = 24 * 3600
_IN_PROGRESS_POLL_SECONDS = 0.25
_ANSWER_MARGIN_SECONDS = 5
# How long a retry waits for its racing original before it answers call_in_progress: a retry
# answers within 5 s, whatever the original does.
RETRY_WAIT_SECONDS = 3.0
# The `retry_after_s` of a call_in_progress answer: the time to the original's in-progress
# deadline (when a dead original can be finished as interrupted), at most this.
RETRY_AFTER_MAX_SECONDS = 10

TimeLeft = Callable[[], float] | None  # seconds the Lambda has left (None outside Lambda)
Run = Callable[[TimeLeft], dict[str, Any]]


class CompletionRows:
    """Audit rows waiting for their call's idempotency completion, by invocation id. `hand` is
    called when the row is rendered; the store `take`s it into the completion's transaction.
    `flush` writes, on its own, a row no completion took (e.g. the call ended in an exception
    before Powertools saved anything), so a handed row is never lost."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, Any]] = {}
        self._extra: dict[str, tuple[dict[str, Any], ...]] = {}
        self._lock = threading.Lock()

    def hand(self, invocation_id: str, row: dict[str, Any], extra: Sequence[dict[str, Any]] = ()) -> None:
        """`extra`: more TransactWriteItems items that ride the same transaction if it goes out
        (an allowlist call's egress reading, dispatch.sessions.egress); dropped if it does not."""
        with self._lock:
            self._rows[invocation_id] = row
            self._extra[invocation_id] = tuple(extra)

    def take(self, invocation_id: str) -> dict[str, Any] | None:
        with self._lock:
            self._extra.pop(invocation_id, None)
            return self._rows.pop(invocation_id, None)

    def take_with_extra(self, invocation_id: str) -> tuple[dict[str, Any] | None, tuple[dict[str, Any], ...]]:
        with self._lock:
            return self._rows.pop(invocation_id, None), self._extra.pop(invocation_id, ())

    def flush(self, invocation_id: str, writer: AuditWriter) -> None:
        row = self.take(invocation_id)
        if row is not None:
            writer.write(row)


class CompletionLost(Exception):
    """The completion's condition failed: a finisher of an interrupted call took the record."""


class IdempotencyStoreUnavailable(Exception):
    """The store could not claim the call: nothing ran (running could run it twice)."""


def record_id(tenant_id: str, call_id: str) -> str:
    """The id of a call's idempotency record: Powertools' `key_prefix#md5(JSON of the key)`, the
    key being KEY_JMESPATH's [tenant_id, call_id] (tests/unit/dispatch/test_idempotency_key.py holds
    it equal to Powertools' own computation)."""
    key = json.dumps([tenant_id, call_id], sort_keys=True).encode()
    return f"{KEY_PREFIX}#{hashlib.md5(key).hexdigest()}"  # noqa: S324 — Powertools' key hash, not a secret


def record_key(record: str) -> dict[str, Any]:
    """The record's DynamoDB key (the table's partition key only: no sort key)."""
    return {ATTR_ID: {"S": record}}


class ResultKeepingStore(DynamoDBPersistenceLayer):
    """Powertools' DynamoDB layer with two changes (see `sandbox_runtime.interrupted`):
    - the claim carries the attempt (audit identity + open-index keys) in the same PutItem, and
      never takes over an in-progress record past its deadline (a dead attempt is finished as
      interrupted instead of being run again);
    - saving the result is the last step of a call that ran: it is conditional on the record still
      being in progress (a finisher of an interrupted call may have won), takes the record out of
      the open index in the same UpdateItem, carries the call's audit row in the same
      TransactWriteItems when one was handed over (`CompletionRows`), and a failure there is
      logged and alarmed, never raised (raising would lose the real result).
    `_put_record` and `_update_record` are the persistence layer's extension points."""

    def __init__(
        self,
        *,
        table_name: str,
        boto3_client: Any,
        rows: CompletionRows | None = None,
        audit_writer: AuditWriter | None = None,
    ) -> None:
        super().__init__(table_name=table_name, boto3_client=boto3_client)
        self.rows, self.audit_writer = rows, audit_writer
        self._rows_by_key: dict[str, dict[str, Any]] = {}  # the row a completion in progress carries
        self._extra_by_key: dict[str, tuple[dict[str, Any], ...]] = {}  # ... and what rides with it

    def save_inprogress(self, data: dict[str, Any], remaining_time_in_millis: int | None = None) -> None:
        record = DataRecord(
            idempotency_key=record_id(data["tenant_id"], data["call_id"]),
            status=STATUS_INPROGRESS,
            expiry_timestamp=self._get_expiry_timestamp(),
            payload_hash=self._get_hashed_payload(data=data),
        )
        if remaining_time_in_millis is not None:
            record.in_progress_expiry_timestamp = int(time.time() * 1000) + remaining_time_in_millis
        self._put_attempt(record, data.get(ATTEMPT_KEY))

    def _put_attempt(self, record: DataRecord, attempt: dict[str, Any] | None) -> None:
        item = {
            **record_key(record.idempotency_key),
            self.expiry_attr: {"N": str(record.expiry_timestamp)},
            self.status_attr: {"S": record.status},
        }
        if record.in_progress_expiry_timestamp is not None:
            item[self.in_progress_expiry_attr] = {"N": str(record.in_progress_expiry_timestamp)}
            if attempt is not None:  # listed for the sweep only when it has a deadline
                item[n.IDEMPOTENCY_ATTR_OPEN] = {"S": n.IDEMPOTENCY_OPEN_VALUE}
                item[n.IDEMPOTENCY_ATTR_DEADLINE] = {"S": deadline_key(record.in_progress_expiry_timestamp)}
        if attempt is not None:
            item[n.IDEMPOTENCY_ATTR_ATTEMPT] = {"S": json.dumps(attempt, sort_keys=True)}
        if self.payload_validation_enabled and record.payload_hash:
            item[self.validation_key_attr] = {"S": record.payload_hash}
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item=item,
                # new, or a finished record past its TTL — never an in-progress one past its deadline
                ConditionExpression="attribute_not_exists(#id) OR #expiry < :now",
                ExpressionAttributeNames={"#id": self.key_attr, "#expiry": self.expiry_attr},
                ExpressionAttributeValues={":now": {"N": str(int(time.time()))}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            old = exc.response.get("Item")
            if old is None:
                raise pt_errors.IdempotencyItemAlreadyExistsError() from exc
            old_record = self._item_to_data_record(old)
            self._validate_payload(data_payload=record, stored_data_record=old_record)
            raise pt_errors.IdempotencyItemAlreadyExistsError(old_data_record=old_record) from exc

    def _update_record(self, data_record: DataRecord) -> None:
        completion = self._completion(data_record)
        key = data_record.idempotency_key
        row = self._rows_by_key.get(key)  # taken out only once it is written or must not be
        if row is None or self.audit_writer is None:
            self.client.update_item(**completion)
            return
        extra = list(self._extra_by_key.pop(key, ()))
        try:  # the completed record and the call's audit row: both land or neither
            self.client.transact_write_items(
                TransactItems=[{"Update": completion}, self.audit_writer.transact_put(row), *extra]
            )
        except ClientError as exc:
            reasons = exc.response.get("CancellationReasons") or []
            if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
                self._rows_by_key.pop(key, None)  # a finisher took the record: its row is the call's one row
                raise CompletionLost from None
        except Exception:  # noqa: BLE001, S110 — transport (dropped, timed out): handled below
            pass
        else:
            self._rows_by_key.pop(key, None)
            return
        # The transaction failed (or its answer was lost): the completion alone, and the row,
        # still in `_rows_by_key`, written on its own by save_success.
        try:
            self.client.update_item(**completion)
        except ClientError as retry_exc:
            if retry_exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            # no longer in progress: the transaction did apply (its answer was lost) or a
            # finisher took the record; either way the row written next is a no-op or the only one
            raise CompletionLost from None

    def _completion(self, data_record: DataRecord) -> dict[str, Any]:
        """The UpdateItem that completes the record: conditional on it still being in progress,
        and taking it out of the open index."""
        names = {
            "#response_data": self.data_attr,
            "#expiry": self.expiry_attr,
            "#status": self.status_attr,
            "#open": n.IDEMPOTENCY_ATTR_OPEN,
            "#deadline": n.IDEMPOTENCY_ATTR_DEADLINE,
        }
        values = {
            ":response_data": {"S": data_record.response_data},
            ":status": {"S": data_record.status},
            ":expiry": {"N": str(data_record.expiry_timestamp)},
            ":inprogress": {"S": STATUS_INPROGRESS},
        }
        update = "SET #response_data = :response_data, #expiry = :expiry, #status = :status"
        if self.payload_validation_enabled:
            update += ", #validation_key = :validation_key"
            names["#validation_key"] = self.validation_key_attr
            values[":validation_key"] = {"S": data_record.payload_hash}
        return {
            "TableName": self.table_name,
            "Key": record_key(data_record.idempotency_key),
            "UpdateExpression": update + " REMOVE #open, #deadline",
            "ConditionExpression": "#status = :inprogress",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }

    def save_success(self, data: dict[str, Any], result: dict[str, Any]) -> None:
        invocation_id = str((data.get(ATTEMPT_KEY) or {}).get("invocation_id") or "")
        row, extra = (
            self.rows.take_with_extra(invocation_id)
            if self.rows is not None and invocation_id
            else (None, ())
        )
        key = record_id(data["tenant_id"], data["call_id"]) if row is not None else None
        if key is not None and row is not None:
            self._rows_by_key[key] = row
            self._extra_by_key[key] = extra
        try:
            super().save_success(data, result)
        except CompletionLost:
            logger.warning("idempotency_completion_lost", extra={"invocation_id": invocation_id})
        except Exception as exc:  # noqa: BLE001 — any store failure: the caller keeps its result
            logger.error("idempotency_save_failed", extra={"cause": redact_head(str(exc), 200)})
            internal_failure("idempotency_store_unavailable:save")
        finally:
            if key is not None:
                self._extra_by_key.pop(key, None)
            unsent = self._rows_by_key.pop(key, None) if key is not None else None
            if unsent is not None and self.audit_writer is not None:
                # the completion did not carry it: written on its own, still once
                self.audit_writer.write(unsent)


def _execute(request: dict[str, Any], run: Run, time_left: TimeLeft) -> dict[str, Any]:
    """The idempotent function: `request` (the payload Powertools hashes and stores) is the one
    the caller already validated, so it is not validated again here."""
    return run(time_left)


class Context(Protocol):
    """The Lambda context as dispatch uses it (Powertools' LambdaContext, or a test's stand-in)."""

    def get_remaining_time_in_millis(self) -> int: ...


def time_left_of(context: Context | None) -> TimeLeft:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining):
        return None
    return lambda: float(remaining()) / 1000


class IdempotentCalls:
    def __init__(
        self,
        *,
        table_name: str,
        ddb: Any,
        interrupted: InterruptedCalls | None = None,
        audit_writer: AuditWriter | None = None,
    ) -> None:
        """`audit_writer`: rows handed to `rows` travel in the completion's transaction (see
        `CompletionRows`); without one, nothing may be handed."""
        self.interrupted = interrupted
        self.rows = CompletionRows()
        self.config = IdempotencyConfig(
            event_key_jmespath=KEY_JMESPATH,
            payload_validation_jmespath=VALIDATION_JMESPATH,
            raise_on_no_idempotency_key=True,
            expires_after_seconds=RECORD_TTL_SECONDS,
        )
        self.store = ResultKeepingStore(
            table_name=table_name,
            boto3_client=ddb,
            rows=self.rows if audit_writer else None,
            audit_writer=audit_writer,
        )
        self.execute: Callable[..., dict[str, Any]] = idempotent_function(
            _execute,
            data_keyword_argument="request",
            persistence_store=self.store,
            config=self.config,
            key_prefix=KEY_PREFIX,
            output_serializer=CustomDictSerializer(to_dict=stored_form, from_dict=unpack),
        )

    def run_once(
        self,
        request: ExecuteCodeRequest,
        context: Context | None,
        run: Run,
        *,
        attempt: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The call's response: run here, or replayed, or — a retry after the in-progress deadline
        of an attempt that died — the interrupted answer (`interrupted.finish`). `attempt` (see
        `sandbox_common.attempts.attempt_fields`) is stored with the claim. Raises SandboxInvalidRequest
        (call_id reused for another request), StillRunning (a retry whose original is still in
        progress, after at most RETRY_WAIT_SECONDS), or IdempotencyStoreUnavailable (nothing ran)."""
        # Powertools reads only the time left of the context it registers (its in-progress expiry)
        self.config.register_lambda_context(cast(LambdaContext, context))
        time_left = time_left_of(context)
        # Wait for a racing original briefly (a retry answers within seconds, never minutes), and
        # never past our own Lambda deadline.
        wait = RETRY_WAIT_SECONDS
        if time_left is not None:
            wait = min(wait, max(0.0, time_left() - _ANSWER_MARGIN_SECONDS))
        deadline = time.monotonic() + wait
        payload = request.model_dump() | ({ATTEMPT_KEY: attempt} if attempt is not None else {})
        while True:
            try:
                return dict(self.execute(request=payload, run=run, time_left=time_left))
            except pt_errors.IdempotencyValidationError:
                raise SandboxInvalidRequest(messages.CALL_ID_REUSED) from None
            except pt_errors.IdempotencyAlreadyInProgressError:
                # A retry racing its original: wait briefly for the original's result (never run twice).
                if time.monotonic() > deadline:
                    raise StillRunning(self._retry_after(payload)) from None
                time.sleep(_IN_PROGRESS_POLL_SECONDS)
            except pt_errors.IdempotencyInconsistentStateError:
                # The attempt holding the record died (its deadline passed, still in progress):
                # finish it as interrupted; a lost race replays whatever the winner stored.
                finished = self._finish_interrupted(payload)
                if finished is not None:
                    return finished
                if time.monotonic() > deadline:
                    raise StillRunning from None
                time.sleep(_IN_PROGRESS_POLL_SECONDS)
            except pt_errors.IdempotencyPersistenceLayerError as exc:
                # Without the idempotency store a retry could run twice: fail closed.
                logger.error("idempotency_store_unavailable", extra={"cause": redact_head(str(exc), 200)})
                raise IdempotencyStoreUnavailable(redact_head(str(exc), 200)) from None

    def replace_answer(self, request: ExecuteCodeRequest, response: dict[str, Any]) -> None:
        """A tool-calling call that paused has ended (its row written): its call_id's record, completed
        with the pause, now holds the final answer, so a retry of the call_id gets that instead of a
        spent continuation. Never raises (logged): the replayed pause's continuation, resumed
        again, answers the final result too (`dispatch.tools.store`)."""
        try:
            self.store.client.update_item(
                TableName=self.store.table_name,
                Key=record_key(record_id(request.tenant_id, request.call_id)),
                UpdateExpression="SET #d = :d",
                ConditionExpression="#s = :done",
                ExpressionAttributeNames={"#d": self.store.data_attr, "#s": self.store.status_attr},
                ExpressionAttributeValues={
                    ":d": {"S": json.dumps(stored_form(response), sort_keys=True)},
                    ":done": {"S": STATUS_COMPLETED},
                },
            )
        except Exception as exc:  # noqa: BLE001 — the call ended and was audited: only the replay is older
            logger.warning("idempotency_answer_not_replaced", extra={"cause": redact_head(str(exc), 200)})

    def _retry_after(self, payload: dict[str, Any]) -> int:
        """Seconds until the original's in-progress deadline (1..RETRY_AFTER_MAX_SECONDS); the
        most when the record cannot be read (the answer is a hint, never a failure)."""
        try:
            key = record_key(record_id(payload["tenant_id"], payload["call_id"]))
            item = self.store.client.get_item(TableName=self.store.table_name, Key=key, ConsistentRead=True)
            deadline_ms = int(item["Item"][self.store.in_progress_expiry_attr]["N"])
        except Exception:  # noqa: BLE001 — no deadline known: the longest hint
            return RETRY_AFTER_MAX_SECONDS
        return int(min(RETRY_AFTER_MAX_SECONDS, max(1, math.ceil(deadline_ms / 1000 - time.time()))))

    def _finish_interrupted(self, payload: dict[str, Any]) -> dict[str, Any] | None:
        if self.interrupted is None:
            return None
        try:
            return self.interrupted.finish(record_id(payload["tenant_id"], payload["call_id"]))
        except Exception as exc:  # noqa: BLE001 — the store is down: nothing may run (fail closed)
            logger.error("idempotency_store_unavailable", extra={"cause": redact_head(str(exc), 200)})
            raise IdempotencyStoreUnavailable(redact_head(str(exc), 200)) from None
