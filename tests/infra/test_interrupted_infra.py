"""Interrupted calls in the synthesized stages: the idempotency table carries the sparse
by_open_attempt index the reaper's interrupted sweep queries, the reaper holds exactly the calls
that sweep makes on it, and its environment names the table."""

from __future__ import annotations

import pytest
from sandbox_common import naming as n

from infra.cdk.config import STAGES
from tests.infra._cfn import allowed_actions, policy_statements, resources, statement_resources

from .test_jobs_infra import _reaper, _table_id


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_interrupted_idempotency_table_has_the_open_attempt_index(all_stages, stage: str) -> None:
    # Given the idempotency table of the stage
    core = all_stages[stage][n.stack_name(stage, "Core")]
    table = resources(core, "AWS::DynamoDB::Table")[_table_id(core, n.IDEMPOTENCY, stage)]["Properties"]
    # Then it declares the sparse index keyed by the open marker and the in-progress deadline
    (index,) = [
        i
        for i in table.get("GlobalSecondaryIndexes", [])
        if i["IndexName"] == n.IDEMPOTENCY_BY_OPEN_ATTEMPT.name
    ]
    assert [(k["AttributeName"], k["KeyType"]) for k in index["KeySchema"]] == [
        (n.IDEMPOTENCY_ATTR_OPEN, "HASH"),
        (n.IDEMPOTENCY_ATTR_DEADLINE, "RANGE"),
    ]


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_interrupted_reaper_role_and_environment_reach_the_idempotency_table(all_stages, stage: str) -> None:
    # Given the reaper's role and function
    core, role_id, fn = _reaper(all_stages, stage)
    statements = [st for owner, st in policy_statements(core) if owner == role_id]
    table_arn = f"<{_table_id(core, n.IDEMPOTENCY, stage)}.Arn>"

    def actions_on(arn: str) -> set[str]:
        return {a for st in statements if arn in statement_resources(st) for a in allowed_actions(st)}

    # Then it may read a record, finish it with conditional updates and query the open index — no
    # Put or Delete (a finisher never creates or removes a claim)
    expected = {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query"}
    assert actions_on(table_arn) == expected
    assert actions_on(f"{table_arn}/index/{n.IDEMPOTENCY_BY_OPEN_ATTEMPT.name}") == expected
    # And its environment names the table
    env = fn["Properties"]["Environment"]["Variables"]
    assert n.ENV_IDEMPOTENCY_TABLE in env
