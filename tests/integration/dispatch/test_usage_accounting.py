"""Usage accounting through the whole execute_code path: every audit row carries
`estimated_cost_usd` (the SSM price when the code ran, 0 when refused), the usage report over
those rows equals a hand count, and crossing a tenant's daily budget is reported, not refused."""

from __future__ import annotations

from decimal import Decimal

import pytest
from sandbox_common import aws, dimensions
from sandbox_common import naming as n

from infra.sandboxctl import usage
from tests.support.emf import emf_records
from tests.support.stack import Stack, event, interpreter, stack

__all__ = ["interpreter", "stack"]
PRICE = "0.0015"


def _set_price(value: str) -> None:
    aws.client("ssm").put_parameter(
        Name=n.cost_per_call_parameter("local"), Value=value, Type="String", Overwrite=True
    )


def _crossings(out: str) -> list[dict[str, str]]:
    return [
        {k: r[k] for k in d["Dimensions"][0]}
        for r in emf_records(out)
        for d in r["_aws"]["CloudWatchMetrics"]
        if d["Metrics"][0]["Name"] == n.METRIC_DAILY_BUDGET_CROSSED
    ]


def test_every_audit_row_has_its_cost_and_usage_equals_a_hand_count(stack: Stack) -> None:
    # Given a price of 0.0015 per call, and globex disabled (pre-flight refusal)
    _set_price(PRICE)
    aws.client("dynamodb").put_item(
        TableName=stack.resources.tables[n.TENANTS.logical],
        Item={
            "tenant_id": {"S": "globex"},
            "item": {"S": n.TENANT_POLICY_ITEM},
            "sandbox_enabled": {"BOOL": False},
        },
    )
    # When acme makes two good calls and one failing call, then hits a cap of 3, and globex is refused
    stack.set_cap(dimensions.TENANT_DAILY.name, 3, tenant_id="acme")
    results = [
        stack.dispatch(event(call_id=f"c{i}", code=code))
        for i, code in enumerate(("x = 1", "print(x)", "1/0", "print(2)"))
    ]
    refused = stack.dispatch(event(tenant_id="globex", turn_id="tg", call_id="g1"))
    # Then the statuses are as expected
    assert [r["exit_status"] for r in results] == ["ok", "ok", "error", "cap_exceeded"]
    assert refused["exit_status"] == "provisioning"
    # And every row carries estimated_cost_usd: the price when code ran, 0 when refused
    rows = stack.audit_rows()
    assert len(rows) == 5 and all(n.AUDIT_ATTR_COST in r for r in rows)
    cost = {r["call_id"]: r[n.AUDIT_ATTR_COST] for r in rows}
    assert cost == {"c0": 0.0015, "c1": 0.0015, "c2": 0.0015, "c3": 0, "g1": 0}
    # And the usage report over acme equals the hand count of its rows
    ddb = aws.client("dynamodb")
    report = usage.usage_report(ddb, stack.resources.tables[n.INVOCATIONS.logical], "acme")
    acme = [r for r in rows if r["tenant_id"] == "acme"]
    assert report["totals"]["calls"] == 4
    assert report["totals"]["calls_by_exit_status"] == {"cap_exceeded": 1, "error": 1, "ok": 2}
    assert report["totals"]["sessions"] == len({r["session_id"] for r in acme if "session_id" in r}) == 1
    assert Decimal(report["totals"]["estimated_cost_usd"]) == Decimal(PRICE) * 3
    assert report["totals"]["rows_without_cost"] == 0


def test_crossing_the_daily_budget_is_reported_once_and_never_refuses(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a price of 0.0015 and acme's daily budget of 0.003 (two calls)
    _set_price(PRICE)
    aws.client("ssm").put_parameter(
        Name=n.tenant_daily_budget_parameter("local", "acme"), Value="0.003", Type="String", Overwrite=True
    )
    capsys.readouterr()
    # When acme makes three calls
    results = [stack.dispatch(event(call_id=f"b{i}", code="print(1)")) for i in range(3)]
    # Then all three ran (the budget refuses nothing)
    assert [r["ok"] for r in results] == [True, True, True]
    # And exactly the second call crossed: the metric once without dimensions, once by tenant
    assert _crossings(capsys.readouterr().out) == [{}, {"tenant_id": "acme"}]


def test_no_budget_and_no_price_emit_no_crossing(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    # Given the default price 0 and no budget parameter
    capsys.readouterr()
    # When acme calls
    result = stack.dispatch(event(call_id="n1", code="print(1)"))
    # Then it ran, its row costs 0, and nothing was reported
    assert result["ok"] is True
    assert [r[n.AUDIT_ATTR_COST] for r in stack.audit_rows()] == [0]
    assert _crossings(capsys.readouterr().out) == []
