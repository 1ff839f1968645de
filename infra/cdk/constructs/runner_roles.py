"""The stage's two tenant-independent roles (Core stack), so a tenant costs at most one IAM role:

- the session-runner role: dispatch and the reaper assume it with a session policy naming only
  the serving tenant's interpreter ARNs (`sandbox_common.runner_policy`); its own policy allows
  the runner's actions on the stage's interpreters, never used without that session policy;
- the shared interpreter execution role: no permission at all, the execution role of every
  interpreter of a tenant without data grants (a tenant with data grants has its own,
  `constructs/tenant.py`).

Both have fixed names (`naming.runner_role_name`, `naming.shared_execution_role_name`), so the
tenant shard stacks name them by ARN without a cross-stack export.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct
from sandbox_common import naming as n

from infra.cdk.config import StageConfig
from infra.cdk.constructs.definitions import (
    interpreter_arn_patterns,
    runner_role_statements,
    runner_trust,
)
from infra.cdk.constructs.nag import acknowledge

AGENTCORE_SERVICE = "bedrock-agentcore.amazonaws.com"


def agentcore_trust(stack: cdk.Stack) -> dict[str, object]:
    """Trust of an interpreter execution role: AgentCore of this account only (no confused deputy)."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": AGENTCORE_SERVICE},
                "Action": "sts:AssumeRole",
                "Condition": {
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {
                        "aws:SourceArn": stack.format_arn(
                            service="bedrock-agentcore",
                            resource="*",
                            arn_format=cdk.ArnFormat.NO_RESOURCE_NAME,
                        )
                    },
                },
            }
        ],
    }


def role_arn(scope: Construct, name: str) -> str:
    """A role's ARN from its fixed name (no cross-stack export)."""
    return cdk.Stack.of(scope).format_arn(
        service="iam",
        region="",
        resource="role",
        resource_name=name,
        arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME,
    )


class RunnerRolesConstruct(Construct):
    """Attributes: `runner_role`, `execution_role` (both iam.CfnRole)."""

    def __init__(
        self, scope: Construct, id_: str, *, config: StageConfig, assumed_by: list[iam.IRole]
    ) -> None:
        super().__init__(scope, id_)
        stack = cdk.Stack.of(self)
        patterns = interpreter_arn_patterns(
            config.name, partition=stack.partition, region=stack.region, account=stack.account
        )
        self.runner_role = iam.CfnRole(
            self,
            "SessionRunnerRole",
            role_name=n.runner_role_name(config.name),
            assume_role_policy_document=runner_trust({"AWS": [r.role_arn for r in assumed_by]}),
            max_session_duration=3600,
            description="Session runner: assumed per tenant with a session policy naming its interpreters",
            policies=[
                {
                    "policyName": "StageInterpreters",
                    "policyDocument": {
                        "Version": "2012-10-17",
                        "Statement": runner_role_statements(patterns),
                    },
                }
            ],
        )
        for pattern in patterns:
            acknowledge(
                self.runner_role,
                f"AwsSolutions-IAM5[Resource::{_nag(pattern)}]",
                "The stage's interpreters by name prefix: this role is only ever assumed with a session "
                "policy naming one tenant's interpreter ARNs (sandbox_common.runner_policy), so a session "
                "reaches that tenant's interpreters alone; interpreters are added with tenants.",
            )
        self.execution_role = iam.CfnRole(
            self,
            "SharedExecutionRole",
            role_name=n.shared_execution_role_name(config.name),
            assume_role_policy_document=agentcore_trust(stack),
            description="Execution role of the interpreters of tenants without data grants: no permissions",
        )
        for role in assumed_by:
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    # TagSession: AssumeRole carries the tenant session tag the runner role requires.
                    sid="AssumeSessionRunnerRole",
                    actions=["sts:AssumeRole", "sts:TagSession"],
                    resources=[self.runner_role.attr_arn],
                )
            )


def _nag(pattern: str) -> str:
    """How cdk-nag spells a pattern built from the stack's pseudo parameters."""
    for token, name in (
        (cdk.Aws.PARTITION, "AWS::Partition"),
        (cdk.Aws.REGION, "AWS::Region"),
        (cdk.Aws.ACCOUNT_ID, "AWS::AccountId"),
    ):
        pattern = pattern.replace(token, f"<{name}>")
    return pattern
