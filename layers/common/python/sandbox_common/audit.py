"""The audit row: its schema and its one writer (the row itself is rendered by
`sandbox_common.outcome.Outcome.audit_row`). Shared by dispatch (write) and sandboxctl
(`audit replay` drains the DLQ through the same writer), so a row has one shape everywhere.

Append-only: the writer only ever calls PutItem with `attribute_not_exists(invocation_id)` (or
sends that same Put inside a TransactWriteItems, `transact_put`);
there is no update or delete path in code (and IAM/resource policy deny them, see infra/).
A write failure never changes the agent's result: bounded retries, then the row goes to the
encrypted SQS dead-letter queue; if even that fails the row is appended to a local spool file
when one is configured (the local stack: its DLQ lives in the same emulated AWS as the table, so
both fail together), else logged (redacted fields only). `drain_spool` replays the spool through
the same writer (`sandboxctl audit replay`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from .naming import AUDIT_ATTR_EGRESS, METRIC_AUDIT_DEAD_LETTERED, TTL_ATTRIBUTE

AUDIT_RETENTION_CEILING_DAYS = 180
WRITE_ATTEMPTS = 3

# The row's attributes, in order. `session_id` is omitted (not null) when no session existed: it is the key of
# the by_session index and DynamoDB rejects NULL index keys; every other attribute is always present.
AUDIT_ATTRIBUTES: tuple[str, ...] = (
    "invocation_id",
    "tenant_id",
    "agent_id",
    "user_id",
    "template_id",
    "turn_id",
    "call_id",
    "session_id",
    "environment",
    "invocation_source",
    "started_at",
    "finished_at",
    "duration_ms",
    "exit_status",
    "exit_code",
    "error",
    "failure_reason",
    "stdout_bytes",
    "stderr_bytes",
    "stdout_truncated",
    "stderr_truncated",
    "executed_code_hash",
    "language",  # python | bash; the hash above is over the script for bash
    TTL_ATTRIBUTE,
    "estimated_cost_usd",  # the SSM price in force for this call; 0 when refused
    AUDIT_ATTR_EGRESS,  # what left the sandbox during the call (sandbox_common.egress_usage)
)


def code_hash(code: str) -> str:
    """SHA-256 hex (lowercase) of the user code's UTF-8 bytes only."""
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


def expires_at(started_at: datetime, retention_days: int) -> int:
    if not 1 <= retention_days <= AUDIT_RETENTION_CEILING_DAYS:
        raise ValueError(
            f"audit retention must be 1..{AUDIT_RETENTION_CEILING_DAYS} days, got {retention_days}"
        )
    return int(started_at.timestamp()) + retention_days * 86_400


def to_item(row: dict[str, Any]) -> dict[str, Any]:
    """Plain row -> DynamoDB attribute values (bools stay BOOL, ints N, None NULL)."""
    from boto3.dynamodb.types import TypeSerializer

    serializer = TypeSerializer()
    # floats (estimated_cost_usd) as Decimal of their shortest repr: TypeSerializer rejects float
    return {k: serializer.serialize(Decimal(repr(v)) if isinstance(v, float) else v) for k, v in row.items()}


def from_item(item: dict[str, Any]) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeDeserializer

    deserializer = TypeDeserializer()
    return {k: _plain(deserializer.deserialize(v)) for k, v in item.items()}


def _plain(value: Any) -> Any:
    """DynamoDB's Decimals as ints (or floats), also inside maps and lists (`egress`, `artifacts`)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class DuplicateAuditRow(Exception):
    """The row's invocation_id already exists (a replay of a row that was written)."""


@dataclass
class AuditWriter:
    table_name: str
    dlq_url: str
    ddb: Any
    sqs: Any
    sleep: Callable[[float], None] = time.sleep
    spool_path: str | None = None  # local stack only: the last resort when the DLQ is down too

    def _put_args(self, row: dict[str, Any]) -> dict[str, Any]:
        return {
            "TableName": self.table_name,
            "Item": to_item(row),
            "ConditionExpression": "attribute_not_exists(invocation_id)",
        }

    def transact_put(self, row: dict[str, Any]) -> dict[str, Any]:
        """The same conditional Put as one item of a TransactWriteItems (dispatch sends the row
        with the call's idempotency completion, functions/dispatch/idempotency.py)."""
        return {"Put": self._put_args(row)}

    def put(self, row: dict[str, Any]) -> None:
        """One conditional PutItem; raises DuplicateAuditRow or the ClientError."""
        from botocore.exceptions import ClientError

        try:
            self.ddb.put_item(**self._put_args(row))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                raise DuplicateAuditRow(row["invocation_id"]) from None
            raise

    def write(self, row: dict[str, Any]) -> str:
        """Write with retries; on final failure dead-letter.

        Returns written|duplicate|dead_lettered|logged."""
        from .observability import emit_metric, logger

        last_error = ""
        for attempt in range(WRITE_ATTEMPTS):
            try:
                self.put(row)
                return "written"
            except DuplicateAuditRow:
                return "duplicate"
            except Exception as exc:  # noqa: BLE001 — any failure: retry, then dead-letter
                last_error = type(exc).__name__
                if attempt + 1 < WRITE_ATTEMPTS:
                    self.sleep(0.05 * (2**attempt))
        try:
            self.sqs.send_message(QueueUrl=self.dlq_url, MessageBody=json.dumps(row, sort_keys=True))
            emit_metric(METRIC_AUDIT_DEAD_LETTERED)
            logger.error(
                "audit_row_dead_lettered", extra={"invocation_id": row["invocation_id"], "cause": last_error}
            )
            return "dead_lettered"
        except Exception as exc:  # noqa: BLE001 — nothing lost: spool, or log as a last resort
            emit_metric(METRIC_AUDIT_DEAD_LETTERED)
            if self.spool_path and _spool_append(self.spool_path, row):
                logger.error(
                    "audit_row_spooled",
                    extra={
                        "invocation_id": row["invocation_id"],
                        "cause": last_error,
                        "dlq_error": type(exc).__name__,
                    },
                )
                return "spooled"
            logger.error(
                "audit_row_unwritable",
                extra={"audit_row": row, "cause": last_error, "dlq_error": type(exc).__name__},
            )
            return "logged"


# --- local spool ---------------------------------------------------------------------
@contextlib.contextmanager
def _spool_locked(path: str) -> Iterator[Any]:
    """The spool file opened for read/append under an exclusive lock (writers and the drain of
    several processes never interleave)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "r+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield handle
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _spool_append(path: str, row: dict[str, Any]) -> bool:
    """Append one row as a JSON line, durably. False if the file cannot be written."""
    try:
        with _spool_locked(path) as handle:
            handle.write(json.dumps(row, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        return True
    except OSError:
        return False


def drain_spool(path: str, writer: AuditWriter) -> dict[str, int]:
    """Replay every spooled row with `writer.put` (the conditional PutItem). Rows written or
    already present leave the spool; rows that fail (AWS still down) or do not parse stay in it,
    in order. Counts: replayed, duplicates, failed, invalid."""
    counts = {"replayed": 0, "duplicates": 0, "failed": 0, "invalid": 0}
    if not os.path.exists(path):
        return counts
    with _spool_locked(path) as handle:
        handle.seek(0)
        keep: list[str] = []
        for line in handle.read().splitlines():
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict) or not row.get("invocation_id"):
                    raise ValueError("no invocation_id")
            except ValueError:
                counts["invalid"] += 1
                keep.append(line)
                continue
            try:
                writer.put(row)
                counts["replayed"] += 1
            except DuplicateAuditRow:
                counts["duplicates"] += 1
            except Exception:  # noqa: BLE001 — kept for the next replay
                counts["failed"] += 1
                keep.append(line)
        handle.truncate(0)
        handle.write("".join(k + "\n" for k in keep))
        handle.flush()
        os.fsync(handle.fileno())
    return counts
