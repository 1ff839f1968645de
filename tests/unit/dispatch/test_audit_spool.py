"""The audit dead-letter path survives the emulated AWS being down: with the table AND
the DLQ unreachable, the row goes to the local spool file; `drain_spool` (what `sandboxctl audit
replay` runs) writes it through the same AuditWriter, exactly once."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from sandbox_common import audit, aws
from sandbox_common import naming as n
from sandbox_common.errors import SandboxError
from sandbox_common.outcome import Outcome

from tests.support.requests import execute_request

REQ = execute_request()
T0 = datetime(2026, 11, 23, 17, 0, 0, tzinfo=UTC)


def _row(invocation_id: str) -> dict[str, Any]:
    """A refused call's row, as the one Outcome renders it."""
    outcome = Outcome(
        request=REQ,
        invocation_id=invocation_id,
        started_at=T0,
        finished_at=T0,
        session_id="sess-1",
        environment="default-public",
    )
    outcome.fail(SandboxError("refused", failure_reason="test"))
    return outcome.audit_row(30)


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens once closed


def _down_writer(spool: Path | None) -> audit.AuditWriter:
    """A writer whose DynamoDB and SQS are both unreachable (connection refused)."""
    down = _closed_port()
    session = boto3.session.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
    config = Config(retries={"total_max_attempts": 1}, connect_timeout=1)
    return audit.AuditWriter(
        table_name="audit",
        dlq_url=f"{down}/123456789012/audit-dlq",
        ddb=session.client("dynamodb", endpoint_url=down, config=config),
        sqs=session.client("sqs", endpoint_url=down, config=config),
        sleep=lambda s: None,
        spool_path=str(spool) if spool else None,
    )


@pytest.fixture
def up_writer(tables: dict[str, str], moto_endpoint: str) -> audit.AuditWriter:
    dlq = aws.client("sqs").create_queue(QueueName="audit-dlq-spool")["QueueUrl"]
    return audit.AuditWriter(
        table_name=tables[n.INVOCATIONS.logical],
        dlq_url=dlq,
        ddb=aws.client("dynamodb"),
        sqs=aws.client("sqs"),
        sleep=lambda s: None,
    )


def test_audit_writer_table_and_dlq_down_spools_the_row(tmp_path: Path) -> None:
    # Given table and DLQ unreachable, and a spool file configured
    spool = tmp_path / n.LOCAL_AUDIT_SPOOL_FILE
    writer = _down_writer(spool)
    # When two rows are written
    outcomes = [writer.write(_row("inv-a")), writer.write(_row("inv-b"))]
    # Then both are in the spool, whole, one JSON line each, readable only by the owner
    assert outcomes == ["spooled", "spooled"]
    assert [json.loads(line) for line in spool.read_text().splitlines()] == [_row("inv-a"), _row("inv-b")]
    assert spool.stat().st_mode & 0o077 == 0


def test_audit_writer_without_spool_still_only_logs(tmp_path: Path) -> None:
    # Given table and DLQ unreachable and no spool (AWS: there is no local disk to trust)
    # When / Then the row is logged as before
    assert _down_writer(None).write(_row("inv-c")) == "logged"


def test_drain_spool_writes_each_row_once_and_empties_the_spool(tmp_path: Path, up_writer, tables) -> None:
    # Given two spooled rows, one of which already reached the table
    spool = tmp_path / n.LOCAL_AUDIT_SPOOL_FILE
    down = _down_writer(spool)
    down.write(_row("inv-d"))
    down.write(_row("inv-e"))
    up_writer.put(_row("inv-e"))
    # When the spool is drained through the writer, twice
    first = audit.drain_spool(str(spool), up_writer)
    second = audit.drain_spool(str(spool), up_writer)
    # Then one row was replayed, one was a duplicate, nothing is left, and a second drain is a no-op
    assert first == {"replayed": 1, "duplicates": 1, "failed": 0, "invalid": 0}
    assert second == {"replayed": 0, "duplicates": 0, "failed": 0, "invalid": 0}
    assert spool.read_text() == ""
    item = aws.client("dynamodb").get_item(
        TableName=tables[n.INVOCATIONS.logical], Key={"invocation_id": {"S": "inv-d"}}
    )["Item"]
    assert audit.from_item(item) == _row("inv-d")


def test_drain_spool_while_aws_still_down_keeps_every_row(tmp_path: Path) -> None:
    # Given a spooled row, a garbage line, and AWS still down
    spool = tmp_path / n.LOCAL_AUDIT_SPOOL_FILE
    down = _down_writer(spool)
    down.write(_row("inv-f"))
    with spool.open("a") as f:
        f.write("not json\n")
    # When drained
    counts = audit.drain_spool(str(spool), down)
    # Then nothing is lost: both lines stay, in order
    assert counts == {"replayed": 0, "duplicates": 0, "failed": 1, "invalid": 1}
    assert spool.read_text().splitlines() == [json.dumps(_row("inv-f"), sort_keys=True), "not json"]
