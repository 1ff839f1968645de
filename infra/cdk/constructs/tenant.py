"""Everything one tenant owns (SPEC §3, §6.4): a Code Interpreter per environment, each with its
own execution role; the tenant's session-runner role, allowed to reach only those interpreters
and trusted only by the dispatch and reaper roles; the published substrate (SSM JSON) dispatch reads; and
the tenant's cap-breach-spike alarm.
"""

from __future__ import annotations

import json

import aws_cdk as cdk
from aws_cdk import aws_bedrockagentcore as agentcore
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm
from constructs import Construct
from sandbox_common import naming as n

from infra.cdk.config import StageConfig, TenantConfig
from infra.cdk.constructs.definitions import (
    RUNNER_ACTIONS,
    interpreter_names,
    runner_trust,
    tenant_data_statements,
    tenant_substrate,
)
from infra.cdk.constructs.nag import acknowledge
from infra.cdk.constructs.observability import cap_breach_spike_alarm_props

AGENTCORE_SERVICE = "bedrock-agentcore.amazonaws.com"


def dispatch_role_arn(scope: Construct, stage: str, logical: str = n.DISPATCH) -> str:
    """A function role's ARN from its fixed name: no cross-stack export to pin the core stack."""
    return cdk.Stack.of(scope).format_arn(
        service="iam",
        region="",
        resource="role",
        resource_name=n.function_role_name(stage, logical),
        arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME,
    )


class ShardShared:
    """What every tenant of a shard stack shares, built once per stack. Each CDK call is a round
    trip to the jsii kernel, so the per-tenant resources below are L1 constructs with plain-data
    properties (one call each): synth time stays nearly flat as tenants are added."""

    def __init__(self, stack: cdk.Stack, config: StageConfig, alarm_action_arns: list[str]) -> None:
        self.account = stack.account
        # Interpreter execution roles: AgentCore of this account only (no confused deputy).
        self.agentcore_trust = _trust(
            {"Service": AGENTCORE_SERVICE},
            {
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnLike": {
                    "aws:SourceArn": stack.format_arn(
                        service="bedrock-agentcore", resource="*", arn_format=cdk.ArnFormat.NO_RESOURCE_NAME
                    )
                },
            },
        )
        # Session-runner roles: trusted by the dispatch role and the session reaper only (the
        # reaper stops leaked sessions and starts warm ones with the tenant's own role, §16), and
        # only with the session tag naming the role's own tenant (see `runner_trust`).
        self.dispatch_principal = {
            "AWS": [dispatch_role_arn(stack, config.name), dispatch_role_arn(stack, config.name, n.REAPER)]
        }
        self.alarm_action_arns = alarm_action_arns


def _trust(principal: dict[str, object], condition: dict[str, object] | None = None) -> dict[str, object]:
    statement: dict[str, object] = {"Effect": "Allow", "Principal": principal, "Action": "sts:AssumeRole"}
    if condition:
        statement["Condition"] = condition
    return {"Version": "2012-10-17", "Statement": [statement]}


class TenantConstruct(Construct):
    """Attributes: `interpreters` and `execution_roles` (environment -> resource),
    `runner_role`, `substrate_parameter`, `cap_alarm` (all L1 resources)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: StageConfig,
        tenant: TenantConfig,
        shared: ShardShared,
    ) -> None:
        super().__init__(scope, id_)
        self._config = config
        self._tenant = tenant
        self._shared = shared
        self.interpreters: dict[str, agentcore.CfnCodeInterpreterCustom] = {}
        self.execution_roles: dict[str, iam.CfnRole] = {}
        for env, name in interpreter_names(config, tenant).items():
            self._build_interpreter(env, name)
        self.runner_role = self._build_runner_role()
        self.substrate_parameter = self._build_substrate()
        self.cap_alarm = self._build_cap_alarm()

    def _build_interpreter(self, env: str, name: str) -> None:
        cid = {"default-public": "Public", "internal-only": "Internal", "default-allowlist": "Allowlist"}[env]
        # Minimal execution role: code in the sandbox gets no AWS permissions (the sandbox is pure
        # compute, §0) except the tenant's own declared data prefixes (§14.4), nothing else. The
        # confused-deputy conditions pin it to this account's AgentCore.
        data = tenant_data_statements(self._tenant, partition=cdk.Aws.PARTITION)
        role = iam.CfnRole(
            self,
            f"{cid}ExecutionRole",
            assume_role_policy_document=self._shared.agentcore_trust,
            description=f"Execution role of Code Interpreter {name} (tenant {self._tenant.id}, {env}); "
            + ("its data prefixes only" if data else "no permissions"),
            policies=(
                [{"policyName": "TenantData", "policyDocument": {"Version": "2012-10-17", "Statement": data}}]
                if data
                else None
            ),
        )
        for resource in sorted(
            {
                r
                for st in data
                if "s3:GetObject" in st["Action"] or "s3:PutObject" in st["Action"]
                for r in st["Resource"]
            }
        ):
            finding = resource.replace(cdk.Aws.PARTITION, "<AWS::Partition>")
            acknowledge(
                role,
                f"AwsSolutions-IAM5[Resource::{finding}]",
                f"Objects under a prefix tenant {self._tenant.id} declared in its `data` config "
                "(s3://bucket/path/ grants bucket/path/*): SPEC §14.4, exactly those, nobody else.",
            )
        interpreter = agentcore.CfnCodeInterpreterCustom(
            self,
            f"{cid}Interpreter",
            name=name,
            # Always explicit: the L2's default is PUBLIC, which must never be an accident.
            network_configuration={"networkMode": n.NETWORK_MODE[env]},
            execution_role_arn=role.attr_arn,
            description=(
                f"Thinkwork sandbox: tenant {self._tenant.id}, environment {env}, stage {self._config.name}"
            ),
            tags={
                "thinkwork:tenant": self._tenant.id,
                "thinkwork:stage": self._config.name,
                "thinkwork:environment": env,
            },
        )
        self.interpreters[env] = interpreter
        self.execution_roles[env] = role

    def _build_runner_role(self) -> iam.CfnRole:
        arns = [i.attr_code_interpreter_arn for i in self.interpreters.values()]
        return iam.CfnRole(
            self,
            "SessionRunnerRole",
            role_name=n.runner_role_name(self._config.name, self._tenant.id),
            assume_role_policy_document=runner_trust(self._shared.dispatch_principal, self._tenant.id),
            max_session_duration=3600,
            description=f"Session runner for tenant {self._tenant.id}: only this tenant's interpreters",
            policies=[
                {
                    "policyName": "TenantInterpreters",
                    "policyDocument": {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Sid": "OwnInterpretersOnly",
                                "Effect": "Allow",
                                "Action": list(RUNNER_ACTIONS),
                                "Resource": arns,
                            }
                        ],
                    },
                }
            ],
        )

    def _build_substrate(self) -> ssm.CfnParameter:
        # Every value is a plain string or a string token, so json.dumps embeds the tokens and
        # CloudFormation joins them (Fn::Join) exactly as Stack.to_json_string would, one jsii
        # round trip fewer per tenant.
        body = tenant_substrate(
            self._config,
            self._tenant,
            interpreters={env: i.attr_code_interpreter_id for env, i in self.interpreters.items()},
            runner_role_arn=self.runner_role.attr_arn,
        )
        return ssm.CfnParameter(
            self,
            "Substrate",
            name=n.tenant_substrate_parameter(self._config.name, self._tenant.id),
            type="String",
            value=json.dumps(body, separators=(",", ":")),
            description=f"Sandbox substrate of tenant {self._tenant.id} (read by dispatch pre-flight)",
        )

    def _build_cap_alarm(self) -> cw.CfnAlarm:
        return cw.CfnAlarm(
            self,
            "CapBreachSpike",
            **cap_breach_spike_alarm_props(self._config, self._tenant.id, self._shared.alarm_action_arns),
        )
