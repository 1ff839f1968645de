"""Audit writer: exactly one conditional PutItem per row; retries, then the
encrypted DLQ; nothing lost; append-only (a second write of the same id never overwrites)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sandbox_common import audit, aws
from sandbox_common import naming as n
from sandbox_common.errors import SandboxCapExceeded, SandboxFailure
from sandbox_common.outcome import Outcome
from sandbox_runtime.runner import ExecutionResult

from tests.support.requests import execute_request

REQ = execute_request(code="print('héllo')")
T0 = datetime(2026, 11, 21, 8, 0, 0, 123000, tzinfo=UTC)


def _result() -> ExecutionResult:
    return ExecutionResult(
        exit_status="ok",
        exit_code=0,
        stdout="héllo\n",
        stderr="",
        stdout_bytes=6,
        stderr_bytes=0,
        stdout_truncated=False,
        stderr_truncated=False,
        duration_ms=5,
        error=None,
        error_message=None,
        failure_reason=None,
        full_stdout="héllo\n",
        full_stderr="",
        session_stopped=False,
    )


def _row(
    *,
    retention_days: int = 30,
    session_id: str | None = "sess-1",
    exit_status: str = "ok",
    failure: SandboxFailure | None = None,
) -> dict[str, Any]:
    """The row an Outcome renders: a call that ran (ok) unless a failure before running is given."""
    outcome = Outcome(
        request=REQ,
        invocation_id="inv-1",
        started_at=T0,
        finished_at=T0.replace(second=2),
        session_id=session_id,
        environment="default-public",
    )
    if failure is None:
        outcome.ran(_result(), None)
    else:
        outcome.fail(failure)
    outcome.exit_status = exit_status
    return outcome.audit_row(retention_days)


@pytest.fixture
def dlq(moto_endpoint: str) -> str:
    return aws.client("sqs").create_queue(QueueName="audit-dlq")["QueueUrl"]


def _writer(tables: dict[str, str], dlq_url: str, table: str | None = None) -> audit.AuditWriter:
    return audit.AuditWriter(
        table_name=table or tables[n.INVOCATIONS.logical],
        dlq_url=dlq_url,
        ddb=aws.client("dynamodb"),
        sqs=aws.client("sqs"),
        sleep=lambda s: None,
    )


def test_outcome_audit_row_has_exact_attributes_and_types() -> None:
    row = _row()
    assert tuple(row) == audit.AUDIT_ATTRIBUTES
    assert row["executed_code_hash"] == hashlib.sha256("print('héllo')".encode()).hexdigest()
    assert row["started_at"] == "2026-11-21T08:00:00.123Z" and row["duration_ms"] == 2000
    assert row["expires_at"] == int(T0.timestamp()) + 30 * 86400
    assert row["stdout_truncated"] is False and row["stderr_bytes"] == 0


def test_outcome_audit_row_without_session_omits_index_key() -> None:
    row = _row(
        session_id=None, exit_status="cap_exceeded", failure=SandboxCapExceeded("cap", failure_reason="cap")
    )
    assert "session_id" not in row
    assert row["exit_code"] is None
    assert row["error"] == "SandboxCapExceeded"


@pytest.mark.parametrize("days", [0, 181])
def test_outcome_audit_row_rejects_retention_outside_1_to_180(days: int) -> None:
    with pytest.raises(ValueError, match="retention"):
        _row(retention_days=days)


def test_write_stores_real_booleans_and_is_append_only(tables: dict[str, str], dlq: str) -> None:
    writer = _writer(tables, dlq)
    assert writer.write(_row()) == "written"
    # a second row with the same id (a replay) never overwrites the first
    assert writer.write(_row(exit_status="error")) == "duplicate"
    item = aws.client("dynamodb").get_item(
        TableName=tables[n.INVOCATIONS.logical], Key={"invocation_id": {"S": "inv-1"}}
    )["Item"]
    assert item["stdout_truncated"] == {"BOOL": False} and item["exit_status"] == {"S": "ok"}
    assert audit.from_item(item) == _row()


def test_write_dead_letters_after_retries_when_table_fails(tables: dict[str, str], dlq: str) -> None:
    # Given a table that does not exist (every PutItem fails)
    writer = _writer(tables, dlq, table="no-such-table")
    # When a row is written / Then it lands in the DLQ, whole and exactly once
    assert writer.write(_row()) == "dead_lettered"
    msgs = aws.client("sqs").receive_message(QueueUrl=dlq, MaxNumberOfMessages=10)["Messages"]
    assert len(msgs) == 1 and json.loads(msgs[0]["Body"]) == _row()


def test_write_logs_row_when_dlq_also_fails(
    tables: dict[str, str], capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    writer = _writer(tables, "http://127.0.0.1:1/nope", table="no-such-table")
    assert writer.write(_row()) == "logged"
    assert n.METRIC_AUDIT_DEAD_LETTERED in capsys.readouterr().out
    record = next(r for r in caplog.records if r.getMessage() == "audit_row_unwritable")
    assert record.audit_row == _row()  # the whole row survives in the log
