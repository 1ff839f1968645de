"""Everything one tenant owns (SPEC §3, §6.4): a Code Interpreter per environment, each with its
own execution role; the tenant's session-runner role, allowed to reach only those interpreters
and trusted only by the dispatch role; the published substrate (SSM JSON) dispatch reads; and
the tenant's cap-breach-spike alarm.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_bedrockagentcore as agentcore
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm
from constructs import Construct
from sandbox_common import naming as n

from infra.config import StageConfig, TenantConfig
from infra.constructs.definitions import RUNNER_ACTIONS, interpreter_names, tenant_substrate
from infra.constructs.observability import cap_breach_spike_alarm

AGENTCORE_SERVICE = "bedrock-agentcore.amazonaws.com"


def dispatch_role_arn(scope: Construct, stage: str) -> str:
    """The dispatch role's ARN from its fixed name: no cross-stack export to pin the core stack."""
    return cdk.Stack.of(scope).format_arn(
        service="iam",
        region="",
        resource="role",
        resource_name=n.function_role_name(stage, n.DISPATCH),
        arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME,
    )


class ShardPrincipals:
    """Principals every tenant of a shard stack shares, built once per stack: each CDK call is a
    round trip to the jsii kernel, and these are identical for all tenants (synth time stays flat
    as tenants are added)."""

    def __init__(self, stack: cdk.Stack, stage: str) -> None:
        # Interpreter execution roles: AgentCore of this account only (no confused deputy).
        self.agentcore = iam.ServicePrincipal(
            AGENTCORE_SERVICE,
            conditions={
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnLike": {
                    "aws:SourceArn": stack.format_arn(
                        service="bedrock-agentcore", resource="*", arn_format=cdk.ArnFormat.NO_RESOURCE_NAME
                    )
                },
            },
        )
        # Session-runner roles: trusted by the dispatch role only.
        self.dispatch = iam.ArnPrincipal(dispatch_role_arn(stack, stage))


class TenantConstruct(Construct):
    """Attributes: `interpreters` and `execution_roles` (environment -> resource),
    `runner_role`, `substrate_parameter`, `cap_alarm`."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: StageConfig,
        tenant: TenantConfig,
        alarm_actions: list[cw.IAlarmAction],
        principals: ShardPrincipals,
    ) -> None:
        super().__init__(scope, id_)
        self._config = config
        self._tenant = tenant
        self._principals = principals
        self.interpreters: dict[str, agentcore.CfnCodeInterpreterCustom] = {}
        self.execution_roles: dict[str, iam.Role] = {}
        for env, name in interpreter_names(config, tenant).items():
            self._build_interpreter(env, name)
        self.runner_role = self._build_runner_role()
        self.substrate_parameter = self._build_substrate()
        self.cap_alarm = cap_breach_spike_alarm(
            self, "CapBreachSpike", config=config, tenant_id=tenant.id, actions=alarm_actions
        )

    def _build_interpreter(self, env: str, name: str) -> None:
        cid = "Public" if env == "default-public" else "Internal"
        # Minimal execution role: code in the sandbox gets no AWS permissions at all (the sandbox
        # is pure compute, §0). The confused-deputy conditions pin it to this account's AgentCore.
        role = iam.Role(
            self,
            f"{cid}ExecutionRole",
            assumed_by=self._principals.agentcore,
            description=f"Execution role of Code Interpreter {name} (tenant {self._tenant.id}, {env}); no permissions",
        )
        interpreter = agentcore.CfnCodeInterpreterCustom(
            self,
            f"{cid}Interpreter",
            name=name,
            # Always explicit: the L2's default is PUBLIC, which must never be an accident.
            network_configuration=agentcore.CfnCodeInterpreterCustom.CodeInterpreterNetworkConfigurationProperty(
                network_mode=n.NETWORK_MODE[env]
            ),
            execution_role_arn=role.role_arn,
            description=f"Thinkwork sandbox: tenant {self._tenant.id}, environment {env}, stage {self._config.name}",
            tags={
                "thinkwork:tenant": self._tenant.id,
                "thinkwork:stage": self._config.name,
                "thinkwork:environment": env,
            },
        )
        self.interpreters[env] = interpreter
        self.execution_roles[env] = role

    def _build_runner_role(self) -> iam.Role:
        arns = [i.attr_code_interpreter_arn for i in self.interpreters.values()]
        return iam.Role(
            self,
            "SessionRunnerRole",
            role_name=n.runner_role_name(self._config.name, self._tenant.id),
            assumed_by=self._principals.dispatch,
            max_session_duration=cdk.Duration.hours(1),
            description=f"Session runner for tenant {self._tenant.id}: only this tenant's interpreters",
            inline_policies={
                "TenantInterpreters": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            sid="OwnInterpretersOnly", actions=list(RUNNER_ACTIONS), resources=arns
                        )
                    ]
                )
            },
        )

    def _build_substrate(self) -> ssm.StringParameter:
        body = tenant_substrate(
            self._config,
            self._tenant,
            interpreters={env: i.attr_code_interpreter_id for env, i in self.interpreters.items()},
            runner_role_arn=self.runner_role.role_arn,
        )
        return ssm.StringParameter(
            self,
            "Substrate",
            parameter_name=n.tenant_substrate_parameter(self._config.name, self._tenant.id),
            string_value=cdk.Stack.of(self).to_json_string(body),
            description=f"Sandbox substrate of tenant {self._tenant.id} (read by dispatch pre-flight)",
        )
