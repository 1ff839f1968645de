"""The daily-budget alarm in every synthesized stage: it watches exactly the metric
and dimension set dispatch's budget check emits, and fires on the first crossing."""

from __future__ import annotations

import pytest
from sandbox_common import naming as n

from tests.infra._cfn import resources
from tests.infra.conftest import STAGES


@pytest.mark.parametrize("stage", STAGES)
def test_daily_budget_alarm_is_in_the_core_stack_on_the_crossing_metric(all_stages, stage: str) -> None:
    # Given the stage's core template
    core = all_stages[stage][n.stack_name(stage, "Core")]
    # When looking for the daily-budget alarm
    alarms = [
        r["Properties"]
        for r in resources(core, "AWS::CloudWatch::Alarm").values()
        if r["Properties"]["AlarmName"] == n.alarm_name(stage, "daily-budget-crossed")
    ]
    # Then there is one, on SandboxDailyBudgetCrossed without dimensions (the set dispatch emits
    # besides tenant_id), firing at the first crossing, naming its runbook
    assert len(alarms) == 1
    alarm = alarms[0]
    assert (alarm["Namespace"], alarm["MetricName"]) == (n.METRICS_NAMESPACE, n.METRIC_DAILY_BUDGET_CROSSED)
    assert "Dimensions" not in alarm and () in n.METRIC_DIMENSIONS[n.METRIC_DAILY_BUDGET_CROSSED]
    assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert f"runbooks/{n.ALARM_RUNBOOKS['daily-budget-crossed']}" in alarm["AlarmDescription"]
