"""Runner roles require the tenant session tag: the dispatch role may assume a
tenant's session-runner role only while tagging the session with that same tenant."""

from __future__ import annotations

import pytest
from sandbox_common import naming as n

from infra.cdk.config import build_config
from infra.cdk.constructs.definitions import runner_trust
from tests.infra._cfn import allowed_actions, policy_statements, resources, statement_resources
from tests.infra.conftest import STAGES

TAG = f"aws:RequestTag/{n.RUNNER_SESSION_TAG_TENANT}"


def _runner_roles(templates: dict, stage: str) -> dict[str, dict]:
    prefix = n.runner_role_name_prefix(stage)
    return {
        r["Properties"]["RoleName"]: r
        for name, template in templates.items()
        if not name.endswith("-Core")
        for r in resources(template, "AWS::IAM::Role").values()
        if r["Properties"].get("RoleName", "").startswith(prefix)
    }


def _trust_allows(statement: dict, action: str, request_tags: dict[str, str]) -> bool:
    """IAM's evaluation of the two condition operators the trust policy uses (the rest of the
    request context is the dispatch role, which the Principal already names)."""
    if action not in allowed_actions(statement):
        return False
    condition = statement.get("Condition", {})
    for key, value in condition.get("StringEquals", {}).items():
        tag = key.removeprefix("aws:RequestTag/")
        if request_tags.get(tag) != value:  # a missing key never equals
            return False
    for key, values in condition.get("ForAllValues:StringEquals", {}).items():
        assert key == "aws:TagKeys"
        if not set(request_tags) <= set(values):
            return False
    return True


@pytest.mark.parametrize("stage", STAGES)
def test_runner_role_trust_requires_its_own_tenant_session_tag(all_stages, stage: str) -> None:
    # Given every tenant's session-runner role in the synthesized shards
    config = build_config(stage)
    roles = _runner_roles(all_stages[stage], stage)
    assert sorted(roles) == sorted(n.runner_role_name(stage, t.id) for t in config.tenants)
    for tenant in config.tenants:
        (statement,) = roles[n.runner_role_name(stage, tenant.id)]["Properties"]["AssumeRolePolicyDocument"][
            "Statement"
        ]
        # Then AssumeRole and TagSession are allowed only with tenant_id = this tenant, no other tag
        assert set(allowed_actions(statement)) == {"sts:AssumeRole", "sts:TagSession"}
        assert statement["Condition"]["StringEquals"] == {TAG: tenant.id}
        assert statement["Condition"]["ForAllValues:StringEquals"] == {
            "aws:TagKeys": [n.RUNNER_SESSION_TAG_TENANT]
        }


def test_runner_trust_refuses_untagged_other_tenant_and_extra_tags() -> None:
    # Given acme's runner-role trust policy
    (statement,) = runner_trust({"AWS": "arn:aws:iam::123456789012:role/dispatch"}, "acme")["Statement"]
    # When / Then only a session tagged tenant_id=acme (and nothing else) may assume it
    assert _trust_allows(statement, "sts:AssumeRole", {"tenant_id": "acme"})
    assert _trust_allows(statement, "sts:TagSession", {"tenant_id": "acme"})
    assert not _trust_allows(statement, "sts:AssumeRole", {})
    assert not _trust_allows(statement, "sts:AssumeRole", {"tenant_id": "globex"})
    assert not _trust_allows(statement, "sts:AssumeRole", {"tenant_id": "acme", "admin": "1"})


@pytest.mark.parametrize("stage", STAGES)
def test_dispatch_role_may_tag_the_runner_sessions_it_assumes(all_stages, stage: str) -> None:
    # Given the core stack's dispatch role
    core = all_stages[stage][n.stack_name(stage, "Core")]
    (role_id,) = [
        rid
        for rid, r in resources(core, "AWS::IAM::Role").items()
        if r["Properties"].get("RoleName") == n.function_role_name(stage, n.DISPATCH)
    ]
    policies = [st for owner, st in policy_statements(core) if owner == role_id]
    # When / Then the statement that assumes runner roles also allows tagging those sessions
    (assume,) = [st for st in policies if "sts:AssumeRole" in allowed_actions(st)]
    assert "sts:TagSession" in allowed_actions(assume)
    assert statement_resources(assume) == [
        f"arn:<AWS::Partition>:iam::<AWS::AccountId>:role/{n.runner_role_name_prefix(stage)}*"
    ]
