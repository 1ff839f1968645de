"""The stage's one session-runner role: trusted by the dispatch and reaper roles only, and only
for a session tagged with the tenant it serves (no other tag)."""

from __future__ import annotations

import pytest
from sandbox_common import naming as n

from infra.cdk.constructs.definitions import runner_trust
from tests.infra._cfn import (
    allowed_actions,
    as_list,
    policy_statements,
    render,
    resources,
    statement_resources,
)
from tests.infra.conftest import STAGES
from tests.support.iam_eval import Request, decide

TAG = f"aws:RequestTag/{n.RUNNER_SESSION_TAG_TENANT}"
DISPATCH = "arn:aws:iam::123456789012:role/dispatch"


def _runner_roles(templates: dict, stage: str) -> dict[str, tuple[str, dict]]:
    """RoleName -> (stack, role) of every role named like a session-runner role."""
    return {
        r["Properties"]["RoleName"]: (stack, r)
        for stack, template in templates.items()
        for r in resources(template, "AWS::IAM::Role").values()
        if r["Properties"].get("RoleName", "").startswith(n.runner_role_name(stage))
    }


@pytest.mark.parametrize("stage", STAGES)
def test_runner_role_one_per_stage_trusted_by_dispatch_and_reaper_with_a_tenant_tag(
    all_stages, stage: str
) -> None:
    # Given the synthesized stage
    roles = _runner_roles(all_stages[stage], stage)
    # Then there is exactly one runner role, in the core stack (none per tenant)
    assert list(roles) == [n.runner_role_name(stage)]
    stack, role = roles[n.runner_role_name(stage)]
    assert stack == n.stack_name(stage, "Core")
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    # And only the dispatch and reaper roles may assume it, only tagging the session's tenant
    principals = {render(p) for p in as_list(statement["Principal"]["AWS"])}
    role_ids = {
        r["Properties"].get("RoleName"): rid
        for rid, r in resources(all_stages[stage][stack], "AWS::IAM::Role").items()
    }
    assert principals == {
        f"<{role_ids[n.function_role_name(stage, logical)]}.Arn>" for logical in (n.DISPATCH, n.REAPER)
    }
    assert set(allowed_actions(statement)) == {"sts:AssumeRole", "sts:TagSession"}
    assert statement["Condition"]["Null"] == {TAG: "false"}
    assert statement["Condition"]["ForAllValues:StringEquals"] == {
        "aws:TagKeys": [n.RUNNER_SESSION_TAG_TENANT]
    }


@pytest.mark.parametrize(
    ("tags", "allowed"),
    [
        ({"tenant_id": "acme"}, True),
        ({"tenant_id": "globex"}, True),  # any tenant: the session policy confines the session
        ({}, False),  # untagged: refused
        ({"tenant_id": "acme", "admin": "1"}, False),  # another tag beside it: refused
        ({"team": "x"}, False),
    ],
)
def test_runner_trust_requires_the_tenant_tag_and_no_other(tags: dict[str, str], allowed: bool) -> None:
    # Given the runner role's trust policy
    trust = runner_trust({"AWS": DISPATCH})
    # When the dispatch role assumes it with these session tags
    context = {f"aws:RequestTag/{k}": v for k, v in tags.items()} | {"aws:TagKeys": list(tags)}
    verdicts = {
        action: decide([trust], Request(action, "*", principal=DISPATCH, context=context))
        for action in ("sts:AssumeRole", "sts:TagSession")
    }
    # Then IAM's evaluation allows it exactly when the tenant tag alone is there
    assert all(v == ("allow" if allowed else "implicit_deny") for v in verdicts.values()), verdicts
    # And another principal is never allowed
    other = Request("sts:AssumeRole", "*", principal="arn:aws:iam::123456789012:role/x", context=context)
    assert decide([trust], other) == "implicit_deny"


@pytest.mark.parametrize("stage", STAGES)
def test_dispatch_and_reaper_roles_assume_only_the_runner_role(all_stages, stage: str) -> None:
    core = all_stages[stage][n.stack_name(stage, "Core")]
    role_ids = {r["Properties"].get("RoleName"): rid for rid, r in resources(core, "AWS::IAM::Role").items()}
    runner_id = role_ids[n.runner_role_name(stage)]
    for logical in (n.DISPATCH, n.REAPER):
        # Given the function's role
        statements = [
            st
            for owner, st in policy_statements(core)
            if owner == role_ids[n.function_role_name(stage, logical)]
        ]
        # Then its one AssumeRole statement also allows tagging, on the runner role alone
        (assume,) = [st for st in statements if "sts:AssumeRole" in allowed_actions(st)]
        assert set(allowed_actions(assume)) == {"sts:AssumeRole", "sts:TagSession"}
        assert statement_resources(assume) == [f"<{runner_id}.Arn>"]
