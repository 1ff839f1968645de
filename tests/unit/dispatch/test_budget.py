"""Per-call price and the per-tenant daily budget (functions/dispatch/budget.py), with SSM in the
moto server and the EMF lines Powertools really prints."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import boto3
import pytest
from dispatch.quota import budget
from sandbox_common import naming as n

from tests.support.emf import emf_records


@pytest.fixture
def ssm(moto_endpoint: str) -> Any:
    return boto3.client("ssm", endpoint_url=moto_endpoint)


def _put(ssm: Any, tenant_id: str, value: str) -> None:
    ssm.put_parameter(
        Name=n.tenant_daily_budget_parameter("local", tenant_id), Value=value, Type="String", Overwrite=True
    )


def test_call_cost_is_the_price_when_code_ran_and_zero_otherwise() -> None:
    # Given a price of 0.0015 / When the code ran or did not / Then the call costs the price or 0
    assert budget.call_cost(True, 0.0015) == 0.0015
    assert budget.call_cost(False, 0.0015) == 0
    assert budget.as_decimal(0.0015) == Decimal("0.0015")


@pytest.mark.parametrize(
    ("count", "crossed"),
    [(1, False), (66, False), (67, True), (68, False), (None, False)],
)
def test_budget_crossed_only_by_the_call_that_reaches_it(count: int | None, crossed: bool) -> None:
    # Given a 0.10 budget at 0.0015 per call (66 calls = 0.099, 67 = 0.1005)
    # When the call numbered `count` today is checked / Then only the 67th crosses
    assert budget.crossed(count, Decimal("0.0015"), Decimal("0.10")) is crossed


def test_budget_never_crossed_without_a_budget_or_a_price() -> None:
    # Given no budget, or a zero price / Then no call ever crosses
    assert budget.crossed(10_000, Decimal("1"), None) is False
    assert budget.crossed(10_000, Decimal("0"), Decimal("0")) is False


def test_budget_reader_reads_the_tenant_parameter_and_treats_absent_as_none(ssm: Any) -> None:
    # Given acme with a 25.50 budget and globex with none
    _put(ssm, "acme", "25.50")
    reader = budget.BudgetReader(stage="local", ssm=ssm)
    # When read / Then acme's decimal, globex None
    assert reader.budget("acme") == Decimal("25.50")
    assert reader.budget("globex") is None


@pytest.mark.parametrize("raw", ["-1", "lots", "NaN", "Infinity"])
def test_budget_reader_ignores_an_invalid_value_with_a_metric(
    ssm: Any, raw: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an invalid budget value
    _put(ssm, "acme", raw)
    # When read
    value = budget.BudgetReader(stage="local", ssm=ssm).budget("acme")
    # Then no budget applies, and the invalid parameter is counted
    assert value is None
    names = [
        m["Name"]
        for r in emf_records(capsys.readouterr().out)
        for d in r["_aws"]["CloudWatchMetrics"]
        for m in d["Metrics"]
    ]
    assert names == [n.METRIC_BUDGET_PARAMETER_INVALID]


def test_budget_reader_fails_open_to_no_budget_when_ssm_is_unreachable() -> None:
    # Given an SSM endpoint nobody listens on
    from botocore.config import Config

    dead = boto3.client(
        "ssm", endpoint_url="http://127.0.0.1:9", config=Config(retries={"total_max_attempts": 1})
    )
    # When read / Then "no budget": cost reporting never fails a call
    assert budget.BudgetReader(stage="local", ssm=dead).budget("acme") is None


def test_report_if_crossed_emits_the_metric_in_both_dimension_sets_and_one_log_line(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Given the call that crosses acme's 0.10 budget
    # When reported
    reported = budget.report_if_crossed("acme", 67, Decimal("0.0015"), Decimal("0.10"))
    # Then SandboxDailyBudgetCrossed without dimensions and by tenant_id, and the log line
    out = capsys.readouterr().out
    assert reported is True
    dimension_sets = [
        tuple(d["Dimensions"][0])
        for r in emf_records(out)
        for d in r["_aws"]["CloudWatchMetrics"]
        if d["Metrics"][0]["Name"] == n.METRIC_DAILY_BUDGET_CROSSED
    ]
    assert dimension_sets == list(n.METRIC_DIMENSIONS[n.METRIC_DAILY_BUDGET_CROSSED])
    logs = [r for r in caplog.records if r.getMessage() == "daily_budget_crossed"]
    assert len(logs) == 1
    assert (logs[0].tenant_id, logs[0].budget_usd, logs[0].calls_today) == ("acme", "0.10", 67)  # type: ignore[attr-defined]
    assert logs[0].estimated_spend_usd == "0.1005"  # type: ignore[attr-defined]


def test_report_if_crossed_is_silent_for_a_call_below_the_budget(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Given the 66th call / When reported / Then nothing is emitted or logged
    assert budget.report_if_crossed("acme", 66, Decimal("0.0015"), Decimal("0.10")) is False
    assert capsys.readouterr().out == ""
    assert [r for r in caplog.records if r.getMessage() == "daily_budget_crossed"] == []


def test_usage_accounting_needs_count_only_for_a_priced_tenant_with_a_budget(ssm: Any) -> None:
    # Given one tenant with a daily budget and one without, read through a real (moto) SSM
    _put(ssm, "acme-budget", "10")
    reader = budget.BudgetReader(stage="local", ssm=ssm)
    priced, free = budget.UsageAccounting(lambda: 0.5, reader), budget.UsageAccounting(lambda: 0.0, reader)
    # When dispatch asks whether the quota Lambda must read the counts back
    # Then only a priced call of a tenant with a budget needs them; no reader needs none at all
    assert priced.needs_count("acme-budget") is True
    assert priced.needs_count("globex") is False
    assert free.needs_count("acme-budget") is False
    assert budget.UsageAccounting(lambda: 0.5).needs_count("acme-budget") is False
