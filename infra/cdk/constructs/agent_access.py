"""Agent runtimes get a grant, not a hand-written policy: for each agent principal of the stage's
tenants file, `lambda:InvokeFunction` on dispatch through a resource policy naming the principal
(an IAM role ARN: the role and its account), and ready managed policies for runtimes in this
account to attach.

- An unscoped principal is granted the function itself (unqualified), i.e. every tenant.
- A principal scoped to tenants is granted only the alias `scope_<tenant>` of each tenant in its
  scope (`sandbox_common.agent_scope`); dispatch reads the scope from the invoked ARN and refuses
  any other tenant. Lambda keeps permissions per qualifier: a grant on an alias is valid only for
  invoking through that alias's ARN, and a grant on the unqualified function only for the
  unqualified ARN, so a scoped principal's grant never reaches the function unscoped. (A
  same-account principal whose OWN identity policy allows invoking the function is not confined
  by this; see docs/agent-access.md.)

Aliases point to `$LATEST`: the code an alias runs is the function's, with nothing to publish.
"""

from __future__ import annotations

import hashlib
import re

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct
from sandbox_common import naming as n
from sandbox_common.agent_scope import alias_for

from infra.cdk.config import StageConfig

INVOKE = "lambda:InvokeFunction"


def _cid(text: str) -> str:
    """A construct id part from a tenant id or ARN: readable, and unique by a hash suffix."""
    readable = re.sub(r"[^A-Za-z0-9]", "", text.title())[:40]
    return f"{readable}{hashlib.sha256(text.encode()).hexdigest()[:8]}"


class AgentAccessConstruct(Construct):
    """Attributes: `aliases` (tenant -> CfnAlias), `permissions` (CfnPermission list),
    `invoke_policy` (every tenant) and `scoped_policies` (tenant -> ManagedPolicy)."""

    def __init__(
        self, scope: Construct, id_: str, *, config: StageConfig, dispatch: lambda_.Function
    ) -> None:
        super().__init__(scope, id_)
        self.aliases: dict[str, lambda_.CfnAlias] = {
            tenant: lambda_.CfnAlias(
                self,
                f"Scope{_cid(tenant)}",
                function_name=dispatch.function_name,
                function_version="$LATEST",
                name=alias_for(tenant),
                description=f"Dispatch for agents scoped to tenant {tenant}",
            )
            for tenant in config.scoped_tenants()
        }
        self.permissions: list[lambda_.CfnPermission] = []
        for agent in config.agents:
            targets = (
                [(agent.principal, dispatch.function_arn)]
                if agent.tenants is None
                else [(f"{agent.principal}|{t}", self.aliases[t].ref) for t in agent.tenants]
            )
            for key, function in targets:
                self.permissions.append(
                    lambda_.CfnPermission(
                        self,
                        f"Invoke{_cid(key)}",
                        action=INVOKE,
                        function_name=function,
                        principal=agent.principal,
                    )
                )
        self.invoke_policy = iam.ManagedPolicy(
            self,
            "InvokeDispatch",
            managed_policy_name=n.agent_invoke_policy_name(config.name),
            description=f"An agent runtime of this account may invoke {config.name} dispatch (every tenant)",
            statements=[iam.PolicyStatement(actions=[INVOKE], resources=[dispatch.function_arn])],
        )
        self.scoped_policies: dict[str, iam.ManagedPolicy] = {
            tenant: iam.ManagedPolicy(
                self,
                f"InvokeDispatch{_cid(tenant)}",
                managed_policy_name=n.agent_invoke_policy_name(config.name, tenant),
                description=f"An agent runtime of this account may invoke {config.name} dispatch: {tenant}",
                statements=[iam.PolicyStatement(actions=[INVOKE], resources=[alias.ref])],
            )
            for tenant, alias in self.aliases.items()
        }
        cdk.CfnOutput(
            self, n.OUTPUT_AGENT_INVOKE_POLICY, value=self.invoke_policy.managed_policy_arn
        ).override_logical_id(n.OUTPUT_AGENT_INVOKE_POLICY)
