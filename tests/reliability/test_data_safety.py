"""Data safety of the audit trail (§7.2, §7.3): DLQ replay exactly once, TTL retention, and no
update/delete path for audit rows in code or IAM."""

from __future__ import annotations

import ast
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sandbox_common import aws
from sandbox_common import naming as n

from tests.support.stack import Stack, event

from .faults import HookFaults, black_hole, hanging_socket, tables_in
from .test_fault_matrix import replay_target

REPO = Path(__file__).resolve().parents[2]


def _dlq_depth(stack: Stack) -> int:
    attrs = aws.client("sqs").get_queue_attributes(QueueUrl=stack.resources.audit_dlq_url,
                                                   AttributeNames=["ApproximateNumberOfMessages",
                                                                   "ApproximateNumberOfMessagesNotVisible"])  # fmt: skip
    return sum(int(v) for v in attrs["Attributes"].values())


def test_data_safety_dlq_replay_restores_every_row_exactly_once(live: Stack, reliability_full: bool,
                                                                record: Any) -> None:  # fmt: skip
    from infra.sandboxctl.ops import audit_replay

    stack = live
    calls = 12 if reliability_full else 4
    drop, hang = black_hole(), hanging_socket()
    hooks = HookFaults(drop=drop, hang=hang)
    table = stack.resources.tables[n.INVOCATIONS.logical]
    # Given the audit table refusing every write for a while
    hooks.arm(aws.client("dynamodb").meta.events, "dynamodb", "access_denied",
              match=lambda r: table in tables_in(r.body))  # fmt: skip
    try:
        results = [stack.dispatch(event(turn_id="ds-turn", call_id=f"ds-{i}", code=f"print({i})")) for i in range(calls)]
    finally:
        hooks.disarm()
        drop.close()
        hang.close()
    stack.dispatch(event("end_turn", turn_id="ds-turn"))
    mine = lambda: [r for r in stack.audit_rows("acme") if r["turn_id"] == "ds-turn"]  # noqa: E731
    dead_lettered, in_table_before = _dlq_depth(stack), len(mine())
    # And one row that reached the table AND the DLQ (its write only looked failed)
    row = mine()[0] if mine() else None
    assert row is None
    first = json.loads(aws.client("sqs").receive_message(QueueUrl=stack.resources.audit_dlq_url,
                                                         VisibilityTimeout=0)["Messages"][0]["Body"])  # fmt: skip
    from sandbox_common.audit import to_item

    aws.client("dynamodb").put_item(TableName=table, Item=to_item(first))
    # When the operator replays the DLQ, twice
    once = audit_replay(replay_target(stack))
    twice = audit_replay(replay_target(stack))
    rows = mine()
    record("data_safety", check="audit DLQ replay (sandboxctl audit replay), run twice",
           figures=f"{calls} calls with the audit table failing: agent results ok {sum(r['ok'] for r in results)}, "
           f"rows in table {in_table_before}, dead-lettered {dead_lettered}; replay 1 {once}; replay 2 {twice}; "
           f"rows after {len(rows)} (distinct {len({r['invocation_id'] for r in rows})}), DLQ left {_dlq_depth(stack)}")
    # Then the agent never noticed, and every row is in the table exactly once, the DLQ empty
    assert all(r["ok"] for r in results)
    assert in_table_before == 0 and dead_lettered == calls
    assert once == {"replayed": calls - 1, "duplicates": 1, "invalid": 0, "failed": 0}
    assert twice == {"replayed": 0, "duplicates": 0, "invalid": 0, "failed": 0}
    assert sorted(r["call_id"] for r in rows) == sorted(f"ds-{i}" for i in range(calls))
    assert len({r["invocation_id"] for r in rows}) == calls and _dlq_depth(stack) == 0
    assert {r["invocation_id"] for r in rows} == {r["invocation_id"] for r in results}


def test_data_safety_ttl_retention_honoured(live: Stack, record: Any) -> None:
    from pydantic import ValidationError
    from sandbox_common.audit import expires_at

    from infra.config import build_config

    stack = live
    stack.dispatch(event(turn_id="ttl-turn", call_id="ttl-1"))
    stack.dispatch(event("end_turn", turn_id="ttl-turn"))
    rows = [r for r in stack.audit_rows("acme") if r["turn_id"] == "ttl-turn"]
    retention = build_config("local").audit_retention_days
    started = datetime.strptime(rows[0]["started_at"].replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
    ttl = aws.client("dynamodb").describe_time_to_live(TableName=stack.resources.tables[n.INVOCATIONS.logical])
    rejected = 0
    for days in (0, 181, 365):
        with pytest.raises(ValueError):
            expires_at(started, days)
        rejected += 1
        with pytest.raises(ValidationError):
            build_config("local").model_copy(update={}).model_validate(
                {**build_config("local").model_dump(), "audit_retention_days": days})
        rejected += 1
    record("data_safety", check="TTL retention (expires_at = started_at + retention_days; >180 rejected)",
           figures=f"retention {retention} d, expires_at - started_at = {rows[0]['expires_at'] - int(started.timestamp())} s; "
           f"TTL attribute {ttl['TimeToLiveDescription'].get('AttributeName')}; {rejected} bad retentions rejected "
           "(writer and StageConfig)")  # fmt: skip
    assert rows[0]["expires_at"] == int(started.timestamp()) + retention * 86_400
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "expires_at"
    assert expires_at(started, 180) == int(started.timestamp()) + 180 * 86_400


_WRITE_CALLS = {"update_item", "delete_item", "batch_write_item", "execute_statement", "batch_execute_statement",
                "execute_transaction", "transact_write_items", "delete_table"}  # fmt: skip


def test_data_safety_no_update_or_delete_path_in_code(record: Any) -> None:
    # Given every module that can name the invocations table
    sources = [p for root in ("functions", "layers/common/python", "infra") for p in (REPO / root).rglob("*.py")]
    touching = [p for p in sources if "INVOCATIONS" in p.read_text() or "invocations_table" in p.read_text()]
    offenders = []
    calls_seen = 0
    for path in touching:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                calls_seen += 1
                if node.func.attr in _WRITE_CALLS:
                    text = ast.get_source_segment(path.read_text(), node) or ""
                    if "INVOCATIONS" in text or "invocations" in text.lower():
                        offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    record("data_safety", check="no UpdateItem/DeleteItem/BatchWrite/PartiQL on the invocations table in code",
           figures=f"{len(sources)} modules scanned, {len(touching)} name the table, {calls_seen} calls inspected, "
           f"{len(offenders)} offending")  # fmt: skip
    assert touching and offenders == []


def test_data_safety_no_update_or_delete_path_in_iam(record: Any) -> None:
    from infra.app_factory import synth_stage

    templates = synth_stage("local")
    resources = {k: v for t in templates.values() for k, v in t.get("Resources", {}).items()}
    table_ids = [k for k, v in resources.items() if v["Type"] == "AWS::DynamoDB::Table"
                 and v["Properties"].get("TableName") == n.INVOCATIONS.physical("local")]  # fmt: skip
    assert len(table_ids) == 1, table_ids
    table_id = table_ids[0]
    forbidden = {"dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "dynamodb:PartiQLUpdate",
                 "dynamodb:PartiQLDelete", "dynamodb:*", "*"}  # fmt: skip
    grants = []
    for key, res in resources.items():
        if res["Type"] not in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::IAM::Role"):
            continue
        docs = [res["Properties"].get("PolicyDocument")] + [p.get("PolicyDocument") for p in res["Properties"].get("Policies", [])]
        for doc in filter(None, docs):
            for st in doc["Statement"]:
                actions = st.get("Action", [])
                actions = [actions] if isinstance(actions, str) else actions
                if st.get("Effect") == "Allow" and table_id in json.dumps(st.get("Resource")):
                    grants.append((key, actions))
    bad = [(k, a) for k, a in grants if forbidden & set(a)]
    policy = resources[table_id]["Properties"].get("ResourcePolicy", {}).get("PolicyDocument", {})
    denied = {a for st in policy.get("Statement", []) if st.get("Effect") == "Deny"
              for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])}  # fmt: skip
    record("data_safety", check="IAM of the synthesized local stage: grants on the invocations table, resource policy",
           figures=f"{len(grants)} allow statements on the table, {len(bad)} with update/delete; resource policy "
           f"denies {sorted(denied)}")  # fmt: skip
    assert grants and bad == []
    assert {"dynamodb:UpdateItem", "dynamodb:DeleteItem"} <= denied
    assert any("PartiQL" in a for a in denied)
