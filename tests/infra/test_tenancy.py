"""Isolation is structural: one interpreter per tenant × environment, at most one IAM role per
tenant, one session-runner role that alone holds interpreter actions (on this stage's interpreters;
each session of it is confined to one tenant by its session policy, tests/unit/runner), and no
interpreter permission on `*` anywhere."""

from __future__ import annotations

import fnmatch
import json
import re

import pytest
from sandbox_common import naming as n
from sandbox_common.models import TenantSubstrate

from infra.cdk.config import build_config
from infra.cdk.constructs.definitions import EGRESS_ROLES, has_own_execution_role, stage_roles
from tests.infra._cfn import (
    allowed_actions,
    policy_statements,
    render,
    resources,
    statement_resources,
)
from tests.infra.conftest import STAGES

INTERPRETER = "AWS::BedrockAgentCore::CodeInterpreterCustom"
AGENTCORE_SESSION_ACTIONS = (
    "bedrock-agentcore:StartCodeInterpreterSession",
    "bedrock-agentcore:InvokeCodeInterpreter",
    "bedrock-agentcore:StopCodeInterpreterSession",
)


def _shards(templates):
    return {k: v for k, v in templates.items() if not k.endswith("-Core")}


def _role_ids(template) -> dict[str, str]:
    return {
        r["Properties"].get("RoleName", rid): rid for rid, r in resources(template, "AWS::IAM::Role").items()
    }


@pytest.mark.parametrize("stage", STAGES)
def test_interpreters_one_per_tenant_environment_with_network_mode(all_stages, stage: str) -> None:
    # Given the stage's tenants
    config = build_config(stage)
    expected = {(t.id, env) for t in config.tenants for env in t.environments}
    # When the interpreters of every shard are collected
    found: list[tuple[str, str]] = []
    for template in _shards(all_stages[stage]).values():
        for res in resources(template, INTERPRETER).values():
            props = res["Properties"]
            tenant, env = props["Tags"]["thinkwork:tenant"], props["Tags"]["thinkwork:environment"]
            found.append((tenant, env))
            # Then each has an AgentCore-valid name, the explicit network mode, and the tenant's own
            # execution role when it has data grants, else the stage's shared one
            assert props["Name"] == n.interpreter_name(stage, tenant, env)
            assert props["Name"].startswith(n.interpreter_name_prefix(stage))
            assert n.INTERPRETER_NAME_RE.match(props["Name"])
            assert props["NetworkConfiguration"]["NetworkMode"] == n.NETWORK_MODE[env]
            # (a VPC-mode interpreter's subnets, groups and CA: tests/infra/test_egress_infra.py)
            if n.NETWORK_MODE[env] != "VPC":
                assert props["NetworkConfiguration"] == {"NetworkMode": n.NETWORK_MODE[env]}
                assert "Certificates" not in props
            if has_own_execution_role(config.tenant(tenant)):
                (rid,) = [
                    v
                    for k, v in _role_ids(template).items()
                    if k == n.tenant_execution_role_name(stage, tenant)
                ]
                assert props["ExecutionRoleArn"] == {"Fn::GetAtt": [rid, "Arn"]}
            else:
                assert render(props["ExecutionRoleArn"]).endswith(
                    f":role/{n.shared_execution_role_name(stage)}"
                )
    assert sorted(found) == sorted(expected)


@pytest.mark.parametrize("stage", STAGES)
def test_execution_roles_trust_only_agentcore_and_grant_only_tenant_data(all_stages, stage: str) -> None:
    # Given every interpreter execution role of the stage: the shared one (core) and the
    # data-granted tenants' own (shards)
    core = all_stages[stage][n.stack_name(stage, "Core")]
    shared = core["Resources"][_role_ids(core)[n.shared_execution_role_name(stage)]]["Properties"]
    own = [
        r["Properties"]
        for template in _shards(all_stages[stage]).values()
        for r in resources(template, "AWS::IAM::Role").values()
    ]
    # Then the shared one has no permission at all, and a tenant's own only its data
    assert "Policies" not in shared and "ManagedPolicyArns" not in shared
    for role in [shared, *own]:
        (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
        assert trust["Principal"] == {"Service": "bedrock-agentcore.amazonaws.com"}
        assert "aws:SourceAccount" in trust["Condition"]["StringEquals"]
        assert "ManagedPolicyArns" not in role
        actions = {
            a
            for p in role.get("Policies", [])
            for st in p["PolicyDocument"]["Statement"]
            for a in st["Action"]
        }
        assert actions <= {
            "s3:GetObject",
            "s3:ListBucket",
            "s3:PutObject",
            "kms:Decrypt",
            "kms:Encrypt",
            "kms:GenerateDataKey",
        }
        assert [p["PolicyName"] for p in role.get("Policies", [])] in ([], ["TenantData"])
    # And the shard roles are exactly the data-granted tenants' (one each)
    config = build_config(stage)
    assert sorted(r["RoleName"] for r in own) == sorted(
        n.tenant_execution_role_name(stage, t.id) for t in config.tenants if has_own_execution_role(t)
    )


@pytest.mark.parametrize("stage", STAGES)
def test_only_the_runner_role_holds_interpreter_actions_and_only_on_this_stages_interpreters(
    all_stages, stage: str
) -> None:
    checked: list[str] = []  # the interpreter resources inspected: the check must have run
    for stack, template in all_stages[stage].items():
        role_names = {rid: name for name, rid in _role_ids(template).items()}
        for owner, statement in policy_statements(template):
            # Given every Allow statement that could match an interpreter action
            covers_interpreter = any(
                fnmatch.fnmatch(action, pattern)
                for action in AGENTCORE_SESSION_ACTIONS
                for pattern in allowed_actions(statement)
            )
            if not covers_interpreter:
                continue
            # Then it is the session-runner role's, on this stage's interpreter names only
            assert role_names.get(owner) == n.runner_role_name(stage), f"{stack}/{owner}"
            for resource in statement_resources(statement):
                assert re.fullmatch(
                    rf"arn:<AWS::Partition>:bedrock-agentcore:<AWS::Region>:<AWS::AccountId>:"
                    rf"code-interpreter(-custom)?/{n.interpreter_name_prefix(stage)}\*",
                    resource,
                ), resource
                checked.append(resource)
    assert len(checked) == 2  # the runner role's two ARN forms


@pytest.mark.parametrize("stage", STAGES)
def test_dispatch_role_holds_no_agentcore_permission_and_assumes_only_the_runner_role(
    all_stages, stage: str
) -> None:
    # Given the core stack's dispatch role
    core = all_stages[stage][n.stack_name(stage, "Core")]
    role_ids = _role_ids(core)
    statements = [
        st
        for owner, st in policy_statements(core)
        if owner == role_ids[n.function_role_name(stage, n.DISPATCH)]
    ]
    actions = [a for st in statements for a in allowed_actions(st)]
    # Then it reaches interpreters only through the runner role
    assert not [a for a in actions if a.startswith("bedrock-agentcore") or a == "*"]
    assume = [st for st in statements if "sts:AssumeRole" in allowed_actions(st)]
    assert [statement_resources(st) for st in assume] == [[f"<{role_ids[n.runner_role_name(stage)]}.Arn>"]]


@pytest.mark.parametrize("stage", STAGES)
def test_substrate_parameter_is_a_valid_tenant_substrate(all_stages, stage: str) -> None:
    config = build_config(stage)
    params = {
        r["Properties"]["Name"]: r["Properties"]["Value"]
        for t in _shards(all_stages[stage]).values()
        for r in resources(t, "AWS::SSM::Parameter").values()
    }
    assert config.tenants  # the loop below must run
    for tenant in config.tenants:
        # Given the tenant's published substrate, with CloudFormation tokens rendered as text
        body = json.loads(render(params[n.tenant_substrate_parameter(stage, tenant.id)]))
        # When dispatch parses it / Then it carries the tier, templates, interpreter ids and ARNs,
        # and the stage's runner role
        substrate = TenantSubstrate.model_validate(body)
        assert substrate.tenant_id == tenant.id
        assert substrate.compliance_tier == tenant.compliance_tier
        assert dict(substrate.templates) == dict(tenant.templates)
        assert set(substrate.interpreters) == set(substrate.interpreter_arns) == set(tenant.environments)
        assert all(v.endswith(".CodeInterpreterId>") for v in substrate.interpreters.values())
        assert all(v.endswith(".CodeInterpreterArn>") for v in substrate.interpreter_arns.values())
        assert substrate.runner_role_arn and substrate.runner_role_arn.endswith(
            f":role/{n.runner_role_name(stage)}"
        )


@pytest.mark.parametrize("stage", STAGES)
def test_stage_roles_counts_every_role_the_stage_creates(all_stages, stage: str) -> None:
    # Given the synthesized stage / Then `stage_roles` (what doctor checks the quota with) is exact
    roles = sum(len(resources(t, "AWS::IAM::Role")) for t in all_stages[stage].values())
    assert roles == stage_roles(build_config(stage))


def test_roles_per_tenant_none_without_data_one_with_data() -> None:
    from infra.cdk.app_factory import synth_stage

    # Given a stage where acme has both environments and no data, globex one environment with data
    tenants = (
        {"id": "acme", "environments": ("default-public", "internal-only")},
        {"id": "globex", "data": {"read": ("s3://globex-data/in/",)}},
    )
    # When it is synthesized
    templates = synth_stage("dev", overrides={"tenants": tenants})
    shard = templates[n.shard_stack_name("dev", 0)]
    roles = resources(shard, "AWS::IAM::Role")
    # Then acme owns no role at all, and globex exactly one
    of_tenant = {
        t: [r for r in roles.values() if t in r["Properties"]["RoleName"]] for t in ("acme", "globex")
    }
    assert len(of_tenant["acme"]) == 0 and len(of_tenant["globex"]) == 1
    assert len(roles) == 1
    # And the whole stage has the function roles, the runner role and the shared role besides,
    # and the egress path's (tests/infra/test_egress_infra.py), none of them per tenant
    total = sum(len(resources(t, "AWS::IAM::Role")) for t in templates.values())
    assert total == len(n.FUNCTIONS) + 2 + EGRESS_ROLES + 1


def test_shard_stacks_do_not_import_core_exports(all_stages) -> None:
    # Given every shard of every stage / Then nothing couples it to the core stack by export
    shards = [(name, t) for templates in all_stages.values() for name, t in _shards(templates).items()]
    assert shards  # the loop below must run
    for name, template in shards:
        assert "Fn::ImportValue" not in json.dumps(template), name
