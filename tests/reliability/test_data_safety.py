"""Data safety of the audit trail: DLQ replay exactly once, TTL retention, and no
update/delete path for audit rows in code or IAM."""

from __future__ import annotations

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
    attrs = aws.client("sqs").get_queue_attributes(
        QueueUrl=stack.resources.audit_dlq_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )
    return sum(int(v) for v in attrs["Attributes"].values())


def test_data_safety_dlq_replay_restores_every_row_exactly_once(
    live: Stack, reliability_full: bool, record: Any
) -> None:
    from infra.sandboxctl.records_ops import audit_replay

    stack = live
    calls = 12 if reliability_full else 4
    drop, hang = black_hole(), hanging_socket()
    hooks = HookFaults(drop=drop, hang=hang)
    table = stack.resources.tables[n.INVOCATIONS.logical]
    # Given the audit table refusing every write for a while
    hooks.arm(
        aws.client("dynamodb").meta.events,
        "dynamodb",
        "access_denied",
        match=lambda r: table in tables_in(r.body),
    )
    try:
        results = [
            stack.dispatch(event(turn_id="ds-turn", call_id=f"ds-{i}", code=f"print({i})"))
            for i in range(calls)
        ]
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
    first = json.loads(
        aws.client("sqs").receive_message(QueueUrl=stack.resources.audit_dlq_url, VisibilityTimeout=0)[
            "Messages"
        ][0]["Body"]
    )
    from sandbox_common.audit import to_item

    aws.client("dynamodb").put_item(TableName=table, Item=to_item(first))
    # When the operator replays the DLQ, twice
    once = audit_replay(replay_target(stack))
    twice = audit_replay(replay_target(stack))
    rows = mine()
    record(
        "data_safety",
        check="audit DLQ replay (sandboxctl audit replay), run twice",
        figures=(
            f"{calls} calls with the audit table failing: agent results ok {sum(r['ok'] for r in results)},"
            f" rows in table {in_table_before}, dead-lettered {dead_lettered}; replay 1 {once}; replay 2"
            f" {twice}; rows after {len(rows)} (distinct {len({r['invocation_id'] for r in rows})}), DLQ left"
            f" {_dlq_depth(stack)}"
        ),
    )
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

    from infra.cdk.config import build_config

    stack = live
    stack.dispatch(event(turn_id="ttl-turn", call_id="ttl-1"))
    stack.dispatch(event("end_turn", turn_id="ttl-turn"))
    rows = [r for r in stack.audit_rows("acme") if r["turn_id"] == "ttl-turn"]
    retention = build_config("local").audit_retention_days
    started = datetime.strptime(rows[0]["started_at"].replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
    ttl = aws.client("dynamodb").describe_time_to_live(
        TableName=stack.resources.tables[n.INVOCATIONS.logical]
    )
    rejected = 0
    for days in (0, 181, 365):
        with pytest.raises(ValueError):
            expires_at(started, days)
        rejected += 1
        with pytest.raises(ValidationError):
            build_config("local").model_copy(update={}).model_validate(
                {**build_config("local").model_dump(), "audit_retention_days": days}
            )
        rejected += 1
    record(
        "data_safety",
        check="TTL retention (expires_at = started_at + retention_days; >180 rejected)",
        figures=(
            f"retention {retention} d, expires_at - started_at ="
            f" {rows[0]['expires_at'] - int(started.timestamp())} s; TTL attribute"
            f" {ttl['TimeToLiveDescription'].get('AttributeName')}; {rejected} bad retentions rejected"
            " (writer and StageConfig)"
        ),
    )
    assert rows[0]["expires_at"] == int(started.timestamp()) + retention * 86_400
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "expires_at"
    assert expires_at(started, 180) == int(started.timestamp()) + 180 * 86_400


_READS = {"GetItem", "Query", "Scan", "BatchGetItem", "DescribeTable"}


def _writes(seen: list[tuple[str, dict[str, Any]]], table: str) -> list[tuple[str, dict[str, Any]]]:
    """Every write to `table`: a request's own, and each action of a transaction on it (its Put
    counts as a PutItem, its Update as an UpdateItem, ...)."""
    writes = []
    for op, params in seen:
        if op == "TransactWriteItems":
            writes += [
                (f"{kind}Item" if kind != "ConditionCheck" else kind, action)
                for item in params["TransactItems"]
                for kind, action in item.items()
                if action.get("TableName") == table
            ]
        elif op not in _READS:
            writes.append((op, params))
    return writes


def _condition(params: dict[str, Any]) -> str:
    """The request's condition with its attribute-name aliases resolved."""
    condition = str(params.get("ConditionExpression", ""))
    for alias, name in (params.get("ExpressionAttributeNames") or {}).items():
        condition = condition.replace(alias, name)
    return condition


def test_data_safety_no_update_or_delete_path_in_code(
    live: Stack, record: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behaviour, not source text: every DynamoDB request any code path of this process sends to
    the invocations table is recorded (a hook on every botocore client), over calls that succeed,
    fail, are refused and are replayed from the DLQ; the only write is a conditional PutItem."""
    import botocore.session
    from dispatch import parts as dependencies

    from infra.sandboxctl.records_ops import audit_list, audit_replay

    stack = live
    table = stack.resources.tables[n.INVOCATIONS.logical]
    seen: list[tuple[str, dict[str, Any]]] = []
    original = botocore.session.Session.create_client

    def create_client(session: Any, *args: Any, **kwargs: Any) -> Any:
        client = original(session, *args, **kwargs)

        def hook(model: Any, params: Any, **_: Any) -> None:
            names = {params.get("TableName"), *(params.get("RequestItems") or {})}
            names |= {a.get("TableName") for item in params.get("TransactItems") or () for a in item.values()}
            if table in names:
                seen.append((model.name, dict(params)))

        client.meta.events.register("before-parameter-build.dynamodb", hook)
        return client

    # Given every client of this process hooked (a fresh dispatch container)
    monkeypatch.setattr(botocore.session.Session, "create_client", create_client)
    aws.clear_clients()
    dependencies.reset()
    # When calls end every way (ok, user error, invalid), a row is dead-lettered and replayed,
    # and the operator lists the trail
    # (a turn and call ids of its own: the module's stack is shared with the test above)
    assert stack.dispatch(event(turn_id="ds-paths", call_id="dsp-1", code="print(1)"))["ok"] is True
    second = stack.dispatch(event(turn_id="ds-paths", call_id="dsp-2", code="1/0"))
    assert second.get("exit_status") == "error", second
    assert (
        stack.dispatch(event(turn_id="ds-paths", call_id="dsp-3", code=" "))["error"]
        == "SandboxInvalidRequest"
    )
    aws.client("sqs").send_message(
        QueueUrl=stack.resources.audit_dlq_url,
        MessageBody=json.dumps(
            {**audit_list(replay_target(stack), tenant_id="acme")[0], "invocation_id": "ds-replayed"}
        ),
    )
    audit_replay(replay_target(stack))
    audit_list(replay_target(stack), tenant_id="acme")
    # Then the invocations table saw only reads and conditional PutItems that never overwrite
    operations = [op for op, _ in seen]
    writes = _writes(seen, table)
    record(
        "data_safety",
        check="no UpdateItem/DeleteItem/BatchWrite/PartiQL on the invocations table in code",
        figures=(
            f"{len(seen)} requests to the table over ok/error/invalid calls, DLQ replay and audit list: "
            f"{sorted(set(operations))}"
        ),
    )
    # the calls' rows travel inside their idempotency completion; the replayed one alone
    assert "TransactWriteItems" in operations and "PutItem" in operations
    assert len(writes) >= 3  # at least two calls' rows + the replayed one
    assert {op for op, _ in writes} == {"PutItem"}
    assert {_condition(p) for _, p in writes} == {"attribute_not_exists(invocation_id)"}


def test_data_safety_no_update_or_delete_path_in_iam(record: Any, synth: Any) -> None:
    templates = synth("local")
    resources = {k: v for t in templates.values() for k, v in t.get("Resources", {}).items()}
    table_ids = [
        k
        for k, v in resources.items()
        if v["Type"] == "AWS::DynamoDB::Table"
        and v["Properties"].get("TableName") == n.INVOCATIONS.physical("local")
    ]
    assert len(table_ids) == 1, table_ids
    table_id = table_ids[0]
    forbidden = {
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:PartiQLUpdate",
        "dynamodb:PartiQLDelete",
        "dynamodb:*",
        "*",
    }
    grants = []
    for key, res in resources.items():
        if res["Type"] not in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::IAM::Role"):
            continue
        docs = [res["Properties"].get("PolicyDocument")] + [
            p.get("PolicyDocument") for p in res["Properties"].get("Policies", [])
        ]
        for doc in filter(None, docs):
            for st in doc["Statement"]:
                actions = st.get("Action", [])
                actions = [actions] if isinstance(actions, str) else actions
                if st.get("Effect") == "Allow" and table_id in json.dumps(st.get("Resource")):
                    grants.append((key, actions))
    bad = [(k, a) for k, a in grants if forbidden & set(a)]
    policy = resources[table_id]["Properties"].get("ResourcePolicy", {}).get("PolicyDocument", {})
    denied = {
        a
        for st in policy.get("Statement", [])
        if st.get("Effect") == "Deny"
        for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
    }
    record(
        "data_safety",
        check="IAM of the synthesized local stage: grants on the invocations table, resource policy",
        figures=(
            f"{len(grants)} allow statements on the table, {len(bad)} with update/delete; resource policy "
            f"denies {sorted(denied)}"
        ),
    )
    assert grants and bad == []
    assert {"dynamodb:UpdateItem", "dynamodb:DeleteItem"} <= denied
    assert any("PartiQL" in a for a in denied)
