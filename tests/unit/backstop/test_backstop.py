"""The backstop Lambda against a real moto server, with real base64(gzip(JSON)) payloads."""

from __future__ import annotations

import base64
import gzip
import json

import boto3
import pytest
from backstop.handler import handler
from sandbox_common import limits, naming
from sandbox_common.redaction import TOKEN_CLASSES
from sandbox_common.redaction.findings import fingerprint

STAGE = "test"
TABLE = naming.FINDINGS.physical(STAGE)
LOG_GROUP = naming.log_group_name(STAGE, naming.DISPATCH)
TS = 1_795_000_000_123
TS_ISO = "2026-11-18T11:06:40.123Z"  # TS in ISO-8601 UTC
TOKENS = {c.name: c.examples[0] for c in TOKEN_CLASSES}
SECRETS = {**TOKENS, "bearer": TOKENS["bearer"].split("Bearer ", 1)[1]}


def payload(events, *, message_type="DATA_MESSAGE") -> dict:
    document = {
        "messageType": message_type,
        "owner": "123456789012",
        "logGroup": LOG_GROUP,
        "logStream": "2026/11/18/[$LATEST]abc",
        "subscriptionFilters": ["backstop"],
        "logEvents": events,
    }
    data = base64.b64encode(gzip.compress(json.dumps(document).encode())).decode()
    return {"awslogs": {"data": data}}


def event(i: int, message: str) -> dict:
    return {"id": f"3717{i:052d}", "timestamp": TS + i, "message": message}


@pytest.fixture
def findings_table(moto_endpoint, monkeypatch):
    monkeypatch.setenv(naming.ENV_STAGE, STAGE)
    monkeypatch.setenv(naming.ENV_FINDINGS_TABLE, TABLE)
    spec = naming.FINDINGS
    boto3.client("dynamodb").create_table(
        TableName=TABLE,
        KeySchema=[
            {"AttributeName": spec.pk, "KeyType": "HASH"},
            {"AttributeName": spec.sk, "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": spec.pk, "AttributeType": "S"},
            {"AttributeName": spec.sk, "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    return TABLE


def all_items(table: str) -> list[dict]:
    items = boto3.resource("dynamodb").Table(table).scan()["Items"]
    return sorted(items, key=lambda i: i[naming.FINDINGS.sk])


def emf_lines(out: str) -> list[dict]:
    lines = []
    for line in out.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and "_aws" in doc:
            lines.append(doc)
    return lines


def metric_values(out: str, name: str) -> list[tuple[dict, float]]:
    found = []
    for doc in emf_lines(out):
        metrics = doc["_aws"]["CloudWatchMetrics"][0]
        if any(m["Name"] == name for m in metrics["Metrics"]):
            dims = {d: doc[d] for d in metrics["Dimensions"][0]}
            found.append((dims, doc[name]))
    return found


def test_ts_iso_constant_is_right():
    # Given / When / Then (guards the expected values below)
    from datetime import UTC, datetime

    assert (
        datetime.fromtimestamp(TS / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        == TS_ISO
    )


def test_backstop_several_tokens_one_finding_each(findings_table, lambda_context, capsys):
    # Given one structured event carrying three tokens, a plain event with one, and a clean one
    structured = (
        json.dumps(
            {
                "level": "INFO",
                "tenant_id": "acme",
                "session_id": "sess-1",
                "stdout": f"{TOKENS['github']} and {TOKENS['jwt']}",
            }
        )
        + f" {TOKENS['aws_access_key']}"
    )
    batch = payload([event(0, structured), event(1, f"plain {TOKENS['slack']}"), event(2, "nothing here")])
    # When
    result = handler(batch, lambda_context)
    # Then one finding per token, with location, class, fingerprint, correlation ids, TTL
    assert result == {"events": 3, "findings": 4, "decode_errors": 0, "control_message": False}
    items = all_items(findings_table)
    assert [(i["event_id"][-1], i["token_class"]) for i in items] == [
        ("0", "github"),
        ("0", "jwt"),
        ("0", "aws_access_key"),
        ("1", "slack"),
    ]
    first = items[0]
    assert first["finding_date"] == "2026-11-18"
    assert first["finding_key"] == f"{TS_ISO}#{event(0, '')['id']}#0"
    assert first["timestamp"] == TS_ISO
    assert first["log_group"] == LOG_GROUP and first["log_stream"] == "2026/11/18/[$LATEST]abc"
    assert first["fingerprint"] == fingerprint(TOKENS["github"])
    assert first["tenant_id"] == "acme" and first["session_id"] == "sess-1"
    assert int(first["expires_at"]) == TS // 1000 + limits.FINDINGS_RETENTION_DAYS * 86400
    assert "tenant_id" not in items[3]
    # and one EMF line per class, dimension token_class only
    out = capsys.readouterr().out
    assert sorted(metric_values(out, naming.METRIC_TOKEN_DETECTED), key=lambda x: x[0]["token_class"]) == [
        ({"token_class": "aws_access_key"}, [1.0]),
        ({"token_class": "github"}, [1.0]),
        ({"token_class": "jwt"}, [1.0]),
        ({"token_class": "slack"}, [1.0]),
    ]


def test_backstop_never_logs_or_stores_the_token(findings_table, lambda_context, capsys):
    # Given every class in one batch
    batch = payload([event(i, f"leak {TOKENS[name]} end") for i, name in enumerate(TOKENS)])
    # When
    handler(batch, lambda_context)
    # Then no secret appears in stdout, stderr or any stored attribute
    captured = capsys.readouterr()
    items = all_items(findings_table)
    assert len(items) == len(TOKENS)
    stored = json.dumps(items, default=str)
    for secret in SECRETS.values():
        assert secret not in captured.out and secret not in captured.err and secret not in stored


def test_backstop_control_message_ignored(findings_table, lambda_context, capsys):
    # Given the CONTROL_MESSAGE CloudWatch sends when a subscription is created
    batch = payload(
        [event(0, "CWL CONTROL MESSAGE: Checking health of destination")], message_type="CONTROL_MESSAGE"
    )
    # When
    result = handler(batch, lambda_context)
    # Then
    assert result["control_message"] is True and result["findings"] == 0
    assert all_items(findings_table) == []
    assert metric_values(capsys.readouterr().out, naming.METRIC_TOKEN_DETECTED) == []


@pytest.mark.parametrize(
    "data",
    [
        "!!!not base64!!!",
        base64.b64encode(b"not gzip at all").decode(),
        base64.b64encode(gzip.compress(b"{not json")).decode(),
        base64.b64encode(gzip.compress(b"[1, 2, 3]")).decode(),
        base64.b64encode(gzip.compress(json.dumps({"messageType": "DATA_MESSAGE"}).encode())).decode(),
    ],
    ids=["bad-base64", "bad-gzip", "bad-json", "not-an-object", "no-events"],
)
def test_backstop_corrupt_payload_counted_and_skipped(findings_table, lambda_context, capsys, data):
    # Given an undecodable subscription record
    # When
    result = handler({"awslogs": {"data": data}}, lambda_context)
    # Then it returns normally, counted once, and the content is not logged
    assert result["decode_errors"] == 1 and result["findings"] == 0
    out = capsys.readouterr().out
    assert metric_values(out, naming.METRIC_BACKSTOP_DECODE_ERRORS) == [({}, [1.0])]
    assert data not in out


def test_backstop_malformed_event_skipped_rest_processed(findings_table, lambda_context, capsys):
    # Given a batch where one event's message is not a string
    batch = payload(
        [{"id": "1", "timestamp": TS, "message": {"nested": True}}, event(2, TOKENS["google_oauth"])]
    )
    # When
    result = handler(batch, lambda_context)
    # Then the good event still yields its finding, the bad one is counted
    assert result == {"events": 2, "findings": 1, "decode_errors": 1, "control_message": False}
    assert [i["token_class"] for i in all_items(findings_table)] == ["google_oauth"]
    assert metric_values(capsys.readouterr().out, naming.METRIC_BACKSTOP_DECODE_ERRORS) == [({}, [1.0])]


def test_backstop_hostile_correlation_ids_not_copied(findings_table, lambda_context):
    # Given a structured line whose tenant_id is not a well-formed id
    message = json.dumps({"tenant_id": "acme'; DROP", "session_id": "x" * 300, "m": TOKENS["aws_access_key"]})
    # When
    handler(payload([event(0, message)]), lambda_context)
    # Then
    (item,) = all_items(findings_table)
    assert "tenant_id" not in item and "session_id" not in item


def test_backstop_one_mib_batch_all_findings_written(findings_table, lambda_context, capsys):
    # Given ~1 MiB of events, one token in every 100th event (more than 25 findings: several batches)
    filler = "INFO request_id=3f2a9c1e-5b7d-4e8f-9a0b-1c2d3e4f5a6b path=/api/v1/items status=200 " * 1
    events = []
    for i in range(10_000):
        message = filler + (TOKENS["aws_access_key"] if i % 100 == 0 else "ok")
        events.append(event(i, message))
    batch = payload(events)
    # When
    result = handler(batch, lambda_context)
    # Then
    assert result["events"] == 10_000 and result["findings"] == 100
    assert len(all_items(findings_table)) == 100
    assert metric_values(capsys.readouterr().out, naming.METRIC_TOKEN_DETECTED) == [
        ({"token_class": "aws_access_key"}, [100.0])
    ]


def test_backstop_redelivery_does_not_duplicate_findings(findings_table, lambda_context):
    # Given the same payload delivered twice (CloudWatch Logs retries async invocations)
    batch = payload([event(0, TOKENS["github"])])
    # When
    handler(batch, lambda_context)
    handler(batch, lambda_context)
    # Then
    assert len(all_items(findings_table)) == 1
