"""Isolation is structural (SPEC §3, §6.4): one interpreter per tenant × environment, runner roles
that name only their own tenant's interpreters, and no interpreter permission on `*` anywhere."""

from __future__ import annotations

import fnmatch
import json
import re

import pytest
from sandbox_common import naming as n
from sandbox_common.models import TenantSubstrate

from infra.cdk.config import build_config
from tests.infra._cfn import (
    allowed_actions,
    as_list,
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
            # Then each has an AgentCore-valid name, the explicit network mode and its own role
            assert props["Name"] == n.interpreter_name(stage, tenant, env)
            assert n.INTERPRETER_NAME_RE.match(props["Name"])
            assert props["NetworkConfiguration"]["NetworkMode"] == n.NETWORK_MODE[env]
            # (a VPC-mode interpreter's subnets, groups and CA: tests/infra/test_egress_infra.py)
            if n.NETWORK_MODE[env] != "VPC":
                assert props["NetworkConfiguration"] == {"NetworkMode": n.NETWORK_MODE[env]}
                assert "Certificates" not in props
            assert "Fn::GetAtt" in props["ExecutionRoleArn"]
    assert sorted(found) == sorted(expected)


@pytest.mark.parametrize("stage", STAGES)
def test_interpreter_execution_roles_are_distinct_and_trust_only_agentcore(all_stages, stage: str) -> None:
    shards = _shards(all_stages[stage])
    assert shards  # the loops below must run
    for template in shards.values():
        # Given every interpreter's execution role
        role_ids = [
            r["Properties"]["ExecutionRoleArn"]["Fn::GetAtt"][0]
            for r in resources(template, INTERPRETER).values()
        ]
        # Then no two interpreters share one, and each is assumable only by AgentCore in this account
        assert role_ids
        assert len(role_ids) == len(set(role_ids))
        for rid in role_ids:
            role = template["Resources"][rid]["Properties"]
            (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
            assert trust["Principal"] == {"Service": "bedrock-agentcore.amazonaws.com"}
            assert "aws:SourceAccount" in trust["Condition"]["StringEquals"]
            # The sandbox is pure compute: no permission but the tenant's own declared data (§14.4,
            # exact prefixes checked in test_files_infra), never a managed policy.
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


@pytest.mark.parametrize("stage", STAGES)
def test_iam_no_policy_allows_agentcore_on_wildcard_resource(all_stages, stage: str) -> None:
    checked: list[str] = []  # the interpreter resources inspected: the check must have run
    for stack, template in all_stages[stage].items():
        for owner, statement in policy_statements(template):
            # Given every Allow statement that could match an interpreter action
            covers_interpreter = any(
                fnmatch.fnmatch(action, pattern)
                for action in AGENTCORE_SESSION_ACTIONS
                for pattern in allowed_actions(statement)
            )
            if not covers_interpreter:
                continue
            # Then it names concrete interpreter ARNs, never a wildcard resource
            for resource in statement_resources(statement):
                assert "*" not in resource, f"{stack}/{owner} allows interpreter actions on {resource}"
                assert re.fullmatch(r"<\w+\.CodeInterpreterArn>", resource), resource
                checked.append(resource)
    # And there were interpreter grants to inspect (one runner role per tenant names them)
    assert checked


@pytest.mark.parametrize("stage", STAGES)
def test_runner_role_names_only_its_own_tenants_interpreters(all_stages, stage: str) -> None:
    config = build_config(stage)
    dispatch_role = f":role/{n.function_role_name(stage, n.DISPATCH)}"
    shards = _shards(all_stages[stage])
    assert shards  # the loop below must run
    for template in shards.values():
        tenant_of = {
            rid: r["Properties"]["Tags"]["thinkwork:tenant"]
            for rid, r in resources(template, INTERPRETER).items()
        }
        runner_roles = {
            rid: r
            for rid, r in resources(template, "AWS::IAM::Role").items()
            if r["Properties"].get("RoleName", "").startswith(n.runner_role_name_prefix(stage))
        }
        assert runner_roles
        for rid, role in runner_roles.items():
            # Given a tenant's session-runner role
            tenant = next(
                t.id
                for t in config.tenants
                if n.runner_role_name(stage, t.id) == role["Properties"]["RoleName"]
            )
            # Then it is trusted by the dispatch role and the session reaper only
            (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
            principals = [render(p) for p in as_list(trust["Principal"]["AWS"])]
            assert len(principals) == 2
            assert principals[0].endswith(dispatch_role)
            assert principals[1].endswith(f":role/{n.function_role_name(stage, n.REAPER)}")
            # And every resource it may touch is an interpreter of that same tenant
            statements = [st for owner, st in policy_statements(template) if owner == rid]
            assert statements
            named = {r["Fn::GetAtt"][0] for st in statements for r in as_list(st["Resource"])}
            assert {tenant_of[i] for i in named} == {tenant}
            assert len(named) == len(config.tenant(tenant).environments)


@pytest.mark.parametrize("stage", STAGES)
def test_dispatch_role_holds_no_agentcore_permission_and_assumes_only_runner_roles(
    all_stages, stage: str
) -> None:
    # Given the core stack's dispatch role
    core = all_stages[stage][n.stack_name(stage, "Core")]
    (dispatch_id,) = [
        rid
        for rid, r in resources(core, "AWS::IAM::Role").items()
        if r["Properties"].get("RoleName") == n.function_role_name(stage, n.DISPATCH)
    ]
    statements = [st for owner, st in policy_statements(core) if owner == dispatch_id]
    actions = [a for st in statements for a in allowed_actions(st)]
    # Then it reaches interpreters only through a tenant's runner role
    assert not [a for a in actions if a.startswith("bedrock-agentcore") or a == "*"]
    assume = [st for st in statements if "sts:AssumeRole" in allowed_actions(st)]
    assert [statement_resources(st) for st in assume] == [
        [f"arn:<AWS::Partition>:iam::<AWS::AccountId>:role/{n.runner_role_name_prefix(stage)}*"]
    ]


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
        # When dispatch parses it / Then it carries the tier, templates, interpreter ids, runner role
        substrate = TenantSubstrate.model_validate(body)
        assert substrate.tenant_id == tenant.id
        assert substrate.compliance_tier == tenant.compliance_tier
        assert dict(substrate.templates) == dict(tenant.templates)
        assert set(substrate.interpreters) == set(tenant.environments)
        assert all(v.endswith(".CodeInterpreterId>") for v in substrate.interpreters.values())
        assert substrate.runner_role_arn and substrate.runner_role_arn.endswith(".Arn>")


def test_shard_stacks_do_not_import_core_exports(all_stages) -> None:
    # Given every shard of every stage / Then nothing couples it to the core stack by export
    shards = [(name, t) for templates in all_stages.values() for name, t in _shards(templates).items()]
    assert shards  # the loop below must run
    for name, template in shards:
        assert "Fn::ImportValue" not in json.dumps(template), name
