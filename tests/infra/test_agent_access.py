"""Agent runtimes get a grant: a resource policy per configured principal, per-tenant aliases of
dispatch for scoped principals (granted those aliases only), and a ready managed policy."""

from __future__ import annotations

import pytest
from sandbox_common import naming as n
from sandbox_common.agent_scope import alias_for

from infra.cdk.config import build_config
from infra.cdk.constructs.definitions import dispatch_aliases
from tests.infra._cfn import render, resources
from tests.infra.conftest import STAGES


def _core(all_stages, stage: str) -> dict:
    return all_stages[stage][n.stack_name(stage, "Core")]


def _dispatch_id(core: dict, stage: str) -> str:
    (rid,) = [
        rid
        for rid, r in resources(core, "AWS::Lambda::Function").items()
        if r["Properties"]["FunctionName"] == n.function_name(stage, n.DISPATCH)
    ]
    return rid


def test_dev_template_grants_each_principal_and_outputs_the_managed_policy(all_stages) -> None:
    # Given dev's agent principals: one unscoped, one scoped to acme
    config = build_config("dev")
    unscoped = [a for a in config.agents if a.tenants is None]
    scoped = [a for a in config.agents if a.tenants is not None]
    assert unscoped and scoped  # the checks below must run
    core = _core(all_stages, "dev")
    dispatch = _dispatch_id(core, "dev")
    aliases = {
        r["Properties"]["Name"]: (rid, r["Properties"])
        for rid, r in resources(core, "AWS::Lambda::Alias").items()
    }
    grants = [
        (p["Principal"], render(p["FunctionName"]))
        for p in (r["Properties"] for r in resources(core, "AWS::Lambda::Permission").values())
        if p["Principal"].startswith("arn:aws:iam::")
    ]
    # Then a scoped principal's alias exists: scope_<tenant>, on dispatch, running $LATEST
    for agent in scoped:
        for tenant in agent.tenants or ():
            _, alias = aliases[alias_for(tenant)]
            assert alias["FunctionName"] == {"Ref": dispatch} and alias["FunctionVersion"] == "$LATEST"
    # And each principal has a resource policy (lambda:InvokeFunction naming its role ARN): the
    # unscoped on the function, the scoped on its tenants' aliases and never on the function
    expected = {(a.principal, f"<{dispatch}.Arn>") for a in unscoped} | {
        (a.principal, f"<{aliases[alias_for(t)][0]}>") for a in scoped for t in a.tenants or ()
    }
    assert sorted(grants) == sorted(expected)
    assert all(
        p["Action"] == "lambda:InvokeFunction"
        for p in (r["Properties"] for r in resources(core, "AWS::Lambda::Permission").values())
    )
    # And the managed policy for same-account runtimes is output, allowing exactly that invoke
    policies = {
        r["Properties"]["ManagedPolicyName"]: (rid, r["Properties"])
        for rid, r in resources(core, "AWS::IAM::ManagedPolicy").items()
    }
    rid, policy = policies[n.agent_invoke_policy_name("dev")]
    assert core["Outputs"][n.OUTPUT_AGENT_INVOKE_POLICY]["Value"] == {"Ref": rid}
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert (
        statement["Action"] == "lambda:InvokeFunction"
        and render(statement["Resource"]) == f"<{dispatch}.Arn>"
    )
    # And one per scoped tenant, on that tenant's alias only
    _, acme = policies[n.agent_invoke_policy_name("dev", "acme")]
    (statement,) = acme["PolicyDocument"]["Statement"]
    assert render(statement["Resource"]) == f"<{aliases[alias_for('acme')][0]}>"


@pytest.mark.parametrize("stage", STAGES)
def test_aliases_are_exactly_the_scoped_tenants_of_the_stage(all_stages, stage: str) -> None:
    # Given the stage's config / When its core template is read
    core = _core(all_stages, stage)
    names = sorted(r["Properties"]["Name"] for r in resources(core, "AWS::Lambda::Alias").values())
    # Then there is one alias per tenant some scoped principal acts for, nothing else
    assert names == sorted(dispatch_aliases(build_config(stage)))


def test_prod_without_agents_grants_nobody(all_stages) -> None:
    # Given prod, whose tenants file lists no agent principal
    assert build_config("prod").agents == ()
    core = _core(all_stages, "prod")
    # Then no role is granted dispatch and no alias exists (the managed policy is still there)
    permissions = [r["Properties"] for r in resources(core, "AWS::Lambda::Permission").values()]
    assert [p for p in permissions if p["Principal"].startswith("arn:aws:iam::")] == []
    assert resources(core, "AWS::Lambda::Alias") == {}
    assert n.OUTPUT_AGENT_INVOKE_POLICY in core["Outputs"]
