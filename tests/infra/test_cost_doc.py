"""docs/cost.md counts what the templates create: its at-rest table is held to the synthesized stages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infra.cdk.config import build_config
from tests.infra._cfn import resources

COST = Path(__file__).resolve().parents[2] / "docs" / "cost.md"


def _count(row: str) -> int:
    match = re.search(rf"^\| {re.escape(row)}[^|]* \| (\d+) \|", COST.read_text(encoding="utf-8"), re.M)
    assert match, row
    return int(match.group(1))


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_cost_doc_at_rest_counts_match_the_templates(all_stages, stage: str) -> None:
    # Given the synthesized stage
    templates = all_stages[stage].values()

    def total(kind: str) -> int:
        return sum(len(resources(t, kind)) for t in templates)

    tenants = len(build_config(stage).tenants)
    # Then the doc's counts are the templates': keys, the dashboard, stage alarms + one per tenant
    assert total("AWS::KMS::Key") == _count("KMS keys")
    assert total("AWS::CloudWatch::Dashboard") == _count("dashboard")
    assert total("AWS::CloudWatch::Alarm") == _count("stage alarms") + tenants
