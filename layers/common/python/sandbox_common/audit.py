"""The audit row of §7: one builder, one writer. Shared by dispatch (write) and sandboxctl
(`audit replay` drains the DLQ through the same writer), so a row has one shape everywhere.

Append-only: the writer only ever calls PutItem with `attribute_not_exists(invocation_id)`;
there is no update or delete path in code (and IAM/resource policy deny them, see infra/).
A write failure never changes the agent's result: bounded retries, then the row goes to the
encrypted SQS dead-letter queue; if even that fails the row is logged (redacted fields only).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from .naming import METRIC_AUDIT_DEAD_LETTERED
from .windows import iso_z_ms

AUDIT_RETENTION_CEILING_DAYS = 180
WRITE_ATTEMPTS = 3

# §7.1, in order. `session_id` is omitted (not null) when no session existed: it is the key of
# the by_session index and DynamoDB rejects NULL index keys; every other attribute is always present.
AUDIT_ATTRIBUTES: tuple[str, ...] = (
    "invocation_id", "tenant_id", "agent_id", "user_id", "template_id", "turn_id", "call_id",
    "session_id", "environment", "invocation_source", "started_at", "finished_at", "duration_ms",
    "exit_status", "exit_code", "error", "failure_reason", "stdout_bytes", "stderr_bytes",
    "stdout_truncated", "stderr_truncated", "executed_code_hash", "expires_at",
    "estimated_cost_usd",  # issue 15: the SSM price in force for this call; 0 when refused
)  # fmt: skip


def code_hash(code: str) -> str:
    """SHA-256 hex (lowercase) of the user code's UTF-8 bytes only (§7.1)."""
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


def expires_at(started_at: datetime, retention_days: int) -> int:
    if not 1 <= retention_days <= AUDIT_RETENTION_CEILING_DAYS:
        raise ValueError(f"audit retention must be 1..{AUDIT_RETENTION_CEILING_DAYS} days, got {retention_days}")
    return int(started_at.timestamp()) + retention_days * 86_400


def build_row(
    *,
    invocation_id: str,
    request: Any,  # ExecuteCodeRequest
    started_at: datetime,
    finished_at: datetime,
    retention_days: int,
    session_id: str | None,
    environment: str | None,
    exit_status: str,
    exit_code: int | None,
    error: str | None,
    failure_reason: str | None,
    stdout_bytes: int = 0,
    stderr_bytes: int = 0,
    stdout_truncated: bool = False,
    stderr_truncated: bool = False,
    estimated_cost_usd: float = 0,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "invocation_id": invocation_id,
        "tenant_id": request.tenant_id,
        "agent_id": request.agent_id,
        "user_id": request.user_id,
        "template_id": request.template_id,
        "turn_id": request.turn_id,
        "call_id": request.call_id,
        "session_id": session_id,
        "environment": environment,
        "invocation_source": request.invocation_source,
        "started_at": iso_z_ms(started_at),
        "finished_at": iso_z_ms(finished_at),
        "duration_ms": max(0, int((finished_at - started_at).total_seconds() * 1000)),
        "exit_status": exit_status,
        "exit_code": exit_code,
        "error": error,
        "failure_reason": failure_reason,
        "stdout_bytes": int(stdout_bytes),
        "stderr_bytes": int(stderr_bytes),
        "stdout_truncated": bool(stdout_truncated),
        "stderr_truncated": bool(stderr_truncated),
        "executed_code_hash": code_hash(request.code),
        "expires_at": expires_at(started_at, retention_days),
        "estimated_cost_usd": estimated_cost_usd,  # a plain number: the row stays JSON (DLQ); to_item makes it N
    }
    if session_id is None:
        del row["session_id"]
    return row


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
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
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

    def put(self, row: dict[str, Any]) -> None:
        """One conditional PutItem; raises DuplicateAuditRow or the ClientError."""
        from botocore.exceptions import ClientError

        try:
            self.ddb.put_item(
                TableName=self.table_name,
                Item=to_item(row),
                ConditionExpression="attribute_not_exists(invocation_id)",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                raise DuplicateAuditRow(row["invocation_id"]) from None
            raise

    def write(self, row: dict[str, Any]) -> str:
        """Write with retries; on final failure dead-letter. Returns written|duplicate|dead_lettered|logged."""
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
            logger.error("audit_row_dead_lettered", extra={"invocation_id": row["invocation_id"], "cause": last_error})
            return "dead_lettered"
        except Exception as exc:  # noqa: BLE001 — nothing lost: the row goes to the log as a last resort
            emit_metric(METRIC_AUDIT_DEAD_LETTERED)
            logger.error(
                "audit_row_unwritable",
                extra={"audit_row": row, "cause": last_error, "dlq_error": type(exc).__name__},
            )
            return "logged"
