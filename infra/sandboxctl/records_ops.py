"""The records `sandboxctl` reads: the audit trail (and the replay of its dead-letter queue), the
redaction backstop's findings, and the artifacts execute_code stored."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, timedelta
from decimal import Decimal
from itertools import chain, islice
from typing import Any

from botocore.exceptions import ClientError
from sandbox_common import limits
from sandbox_common import naming as n
from sandbox_common.audit import AuditWriter, drain_spool
from sandbox_common.windows import iso_z_ms, utc_now

from infra.sandboxctl.errors import CtlError
from infra.sandboxctl.items import deserialize, error_code, paged_items, parse_time, serialize
from infra.sandboxctl.target import Target


# --- audit -----------------------------------------------------------------------------------
def audit_list(
    target: Target,
    tenant_id: str,
    *,
    agent_id: str | None = None,
    session_id: str | None = None,
    since: str | None = None,
    limit: int = 20,
) -> list[dict[str, Any]]:
    index = n.INVOCATIONS_BY_SESSION if session_id else n.INVOCATIONS_BY_TENANT_TIME
    names = {"#pk": index.pk}
    pk_value = session_id if session_id else tenant_id
    values: dict[str, Any] = {":pk": {"S": pk_value}}
    key = "#pk = :pk"
    if since:
        names["#st"] = str(index.sk)
        values[":since"] = {"S": iso_z_ms(parse_time(since))}
        key += " AND #st >= :since"
    filters = []
    if session_id:  # a session id never reveals another tenant's rows
        names["#t"] = "tenant_id"
        values[":t"] = {"S": tenant_id}
        filters.append("#t = :t")
    if agent_id:
        names["#a"] = "agent_id"
        values[":a"] = {"S": agent_id}
        filters.append("#a = :a")
    kwargs: dict[str, Any] = {
        "TableName": target.table(n.INVOCATIONS),
        "IndexName": index.name,
        "KeyConditionExpression": key,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ScanIndexForward": False,
    }
    if filters:
        kwargs["FilterExpression"] = " AND ".join(filters)
    return list(islice(paged_items(target, "query", **kwargs), limit))


def audit_get(target: Target, invocation_id: str) -> dict[str, Any] | None:
    item = (
        target.client("dynamodb")
        .get_item(
            TableName=target.table(n.INVOCATIONS),
            Key=n.INVOCATIONS.key(invocation_id),
            ConsistentRead=True,
        )
        .get("Item")
    )
    return deserialize(item) if item else None


def audit_replay(target: Target, *, max_messages: int = 10_000) -> dict[str, Any]:
    """Drain the audit DLQ exactly once: a row already in the table (an earlier replay, or the
    original write that only looked failed) is a duplicate, and its message is deleted too."""
    sqs, ddb = target.client("sqs"), target.client("dynamodb")
    counts = {"replayed": 0, "duplicates": 0, "invalid": 0, "failed": 0}
    seen: set[str] = set()
    while sum(counts.values()) < max_messages:
        messages = sqs.receive_message(
            QueueUrl=target.audit_dlq_url, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=60
        ).get("Messages", [])
        fresh = [m for m in messages if m["MessageId"] not in seen]
        if not fresh:
            break
        for message in fresh:
            seen.add(message["MessageId"])
            try:
                row = json.loads(message["Body"], parse_float=Decimal)
                if not isinstance(row, dict) or not row.get(n.INVOCATIONS.pk):
                    raise ValueError("no invocation_id")
            except ValueError:
                counts["invalid"] += 1  # left in the queue for a human: never dropped
                continue
            try:
                ddb.put_item(
                    TableName=target.table(n.INVOCATIONS),
                    Item=serialize(row),
                    ConditionExpression="attribute_not_exists(#id)",
                    ExpressionAttributeNames={"#id": n.INVOCATIONS.pk},
                )
                counts["replayed"] += 1
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    counts["failed"] += 1
                    continue
                counts["duplicates"] += 1
            sqs.delete_message(QueueUrl=target.audit_dlq_url, ReceiptHandle=message["ReceiptHandle"])
    if target.audit_spool:
        # Local stack: rows spooled while its emulated AWS was down, through the same writer.
        writer = AuditWriter(
            table_name=target.table(n.INVOCATIONS), dlq_url=target.audit_dlq_url, ddb=ddb, sqs=sqs
        )
        for key, value in drain_spool(target.audit_spool, writer).items():
            counts[key] += value
    return counts


# --- findings --------------------------------------------------------------------------------
def findings_list(target: Target, *, since: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """Backstop findings at or after `since` (default: the last 24 h), newest first. The table
    is partitioned by UTC day and sorted by `<ISO timestamp>#<event id>#<n>`, so `since` is a
    key condition on its own day and whole partitions after it."""
    now = utc_now()
    start = parse_time(since) if since else now - timedelta(hours=24)
    days = (now.date() - start.astimezone(UTC).date()).days
    if days > limits.FINDINGS_RETENTION_DAYS:
        raise CtlError(
            f"--since is more than {limits.FINDINGS_RETENTION_DAYS} days ago (findings expire after that)"
        )
    partitions = []
    for offset in range(max(days, 0) + 1):  # newest partition first
        day = (now - timedelta(days=offset)).strftime("%Y-%m-%d")
        kwargs: dict[str, Any] = {
            "TableName": target.table(n.FINDINGS),
            "KeyConditionExpression": "#pk = :d",
            "ExpressionAttributeNames": {"#pk": n.FINDINGS.pk},
            "ExpressionAttributeValues": {":d": {"S": day}},
            "ScanIndexForward": False,
        }
        if offset == days:  # the oldest partition: only from `since` on
            kwargs["KeyConditionExpression"] += " AND #sk >= :s"
            kwargs["ExpressionAttributeNames"]["#sk"] = n.FINDINGS.sort_key
            kwargs["ExpressionAttributeValues"][":s"] = {"S": iso_z_ms(start)}
        partitions.append(paged_items(target, "query", **kwargs))
    return list(islice(chain.from_iterable(partitions), limit))


# --- files ---------------------------------------------------------------
def _artifacts_bucket(target: Target) -> str:
    if not target.artifacts_bucket:
        raise CtlError(f"stage {target.stage} has no artifacts bucket (output {n.OUTPUT_ARTIFACTS_BUCKET})")
    return target.artifacts_bucket


def files_list(target: Target, tenant_id: str, turn_id: str | None = None) -> list[dict[str, Any]]:
    """A tenant's artifacts, newest first (optionally one turn's)."""
    from sandbox_common.files import list_pointers

    pointers = list_pointers(target.client("s3"), _artifacts_bucket(target), tenant_id, turn_id)
    keep = (
        "file_id",
        "filename",
        "bytes",
        "content_type",
        "sha256",
        "created_at",
        "turn_id",
        "invocation_id",
    )
    return [{k: p.get(k) for k in keep} for p in pointers]


def files_get(target: Target, tenant_id: str, file_id: str, path: str) -> dict[str, Any]:
    """Write one artifact's bytes to `path`, only if they hash to its recorded sha256."""
    from sandbox_common.files import read_pointer

    bucket = _artifacts_bucket(target)
    s3 = target.client("s3")
    pointer = read_pointer(s3, bucket, tenant_id, file_id)
    if pointer is None:
        raise CtlError(f"no file {file_id} for tenant {tenant_id}")
    data = s3.get_object(Bucket=bucket, Key=pointer["key"])["Body"].read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != pointer["sha256"]:
        raise CtlError(
            f"file {file_id}: sha256 {digest} does not match the recorded {pointer['sha256']}; nothing"
            " written"
        )
    partial = f"{path}.partial"
    with open(partial, "wb") as fh:
        fh.write(data)
    os.replace(partial, path)
    return {
        "file_id": file_id,
        "filename": pointer["filename"],
        "bytes": len(data),
        "sha256": digest,
        "path": path,
    }
