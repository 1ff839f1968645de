"""Everything one tenant owns: a Code Interpreter per environment; an execution role of its own
only when it has data grants (else its interpreters use the stage's shared no-permission role);
the published substrate (SSM JSON) dispatch reads, with its interpreter ids and ARNs and the
stage's session-runner role; and the tenant's cap-breach-spike alarm. A tenant costs at most one
IAM role: the session runner is the stage's one role, confined per tenant by a session policy
(`constructs/runner_roles.py`).
"""

from __future__ import annotations

import json

import aws_cdk as cdk
from aws_cdk import aws_bedrockagentcore as agentcore
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm
from constructs import Construct
from sandbox_common import naming as n

from infra.cdk.config import StageConfig, TenantConfig
from infra.cdk.constructs.definitions import (
    interpreter_names,
    tenant_data_statements,
    tenant_substrate,
)
from infra.cdk.constructs.nag import acknowledge
from infra.cdk.constructs.observability import cap_breach_spike_alarm_props
from infra.cdk.constructs.runner_roles import agentcore_trust, role_arn

# Construct id of each environment's interpreter (the logical ids of deployed ones).
INTERPRETER_IDS: dict[str, str] = {
    "default-public": "Public",
    "internal-only": "Internal",
    "default-allowlist": "Allowlist",
}


class EgressInputs:
    """What the VPC-mode interpreters of a shard take from the core stack's egress path, as
    SSM-typed stack parameters resolved at deploy (naming.egress_network_parameter): no export
    couples the stacks, so adding a tenant still touches only its own shard."""

    def __init__(self, stack: cdk.Stack, config: StageConfig) -> None:
        assert config.egress is not None  # the config refuses allowlist environments without it
        self.egress = config.egress

        def parameter(cid: str, leaf: str, type_: str) -> str:
            return cdk.CfnParameter(
                stack,
                cid,
                type=f"AWS::SSM::Parameter::Value<{type_}>",
                default=n.egress_network_parameter(config.name, leaf),
                description=f"Egress path of stage {config.name}: {leaf} (published by the core stack)",
            ).value_as_string

        self.subnets = cdk.Token.as_list(
            cdk.CfnParameter(
                stack,
                "EgressSessionSubnets",
                type="AWS::SSM::Parameter::Value<List<AWS::EC2::Subnet::Id>>",
                default=n.egress_network_parameter(config.name, n.EGRESS_SESSION_SUBNETS),
                description=f"Egress path of stage {config.name}: the sessions VPC's isolated subnets",
            ).value
        )
        self.vpc_id = parameter("EgressSessionsVpc", n.EGRESS_SESSIONS_VPC, "AWS::EC2::VPC::Id")
        self.s3_prefix_list = parameter("EgressS3PrefixList", n.EGRESS_S3_PREFIX_LIST, "String")
        self.ca_cert_arn = parameter("EgressCaCertificateArn", n.EGRESS_CA_CERT_ARN, "String")


class ShardShared:
    """What every tenant of a shard stack shares, built once per stack. Each CDK call is a round
    trip to the jsii kernel, so the per-tenant resources below are L1 constructs with plain-data
    properties (one call each): synth time stays nearly flat as tenants are added."""

    def __init__(self, stack: cdk.Stack, config: StageConfig, alarm_action_arns: list[str]) -> None:
        self._stack = stack
        self._config = config
        self._egress: EgressInputs | None = None
        self.account = stack.account
        self.agentcore_trust = agentcore_trust(stack)
        # The Core stack's roles, by their fixed names (the shard stack depends on the core stack).
        self.runner_role_arn = role_arn(stack, n.runner_role_name(config.name))
        self.shared_execution_role_arn = role_arn(stack, n.shared_execution_role_name(config.name))
        self.alarm_action_arns = alarm_action_arns

    @property
    def egress(self) -> EgressInputs:
        """Made when the shard's first VPC-mode interpreter asks: a shard without one declares no
        egress parameters at all (its template is as before)."""
        if self._egress is None:
            self._egress = EgressInputs(self._stack, self._config)
        return self._egress


class TenantConstruct(Construct):
    """Attributes: `interpreters` (environment -> interpreter), `execution_role` (the tenant's own
    role, None when it shares the stage's), `substrate_parameter`, `cap_alarm` (all L1)."""

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
        self.security_groups: dict[str, ec2.CfnSecurityGroup] = {}
        self.egress_policies: dict[str, ssm.CfnParameter] = {}
        self.execution_role = self._build_execution_role()
        execution_role_arn = (
            self.execution_role.attr_arn
            if self.execution_role is not None
            else shared.shared_execution_role_arn
        )
        for env, name in interpreter_names(config, tenant).items():
            self._build_interpreter(env, name, execution_role_arn)
        for env in tenant.allowlist_environments:
            self.egress_policies[env] = self._build_egress_policy(env)
        self.substrate_parameter = self._build_substrate()
        self.cap_alarm = self._build_cap_alarm()

    def _build_execution_role(self) -> iam.CfnRole | None:
        """Code in the sandbox gets no AWS permission (the sandbox is pure compute) except the
        tenant's own declared data prefixes: only such a tenant needs a role of its own, one for
        all its environments. The confused-deputy conditions pin it to this account's AgentCore."""
        data = tenant_data_statements(self._tenant, partition=cdk.Aws.PARTITION)
        if not data:
            return None
        role = iam.CfnRole(
            self,
            "ExecutionRole",
            role_name=n.tenant_execution_role_name(self._config.name, self._tenant.id),
            assume_role_policy_document=self._shared.agentcore_trust,
            description=f"Execution role of tenant {self._tenant.id}'s interpreters: its data prefixes only",
            policies=[
                {"policyName": "TenantData", "policyDocument": {"Version": "2012-10-17", "Statement": data}}
            ],
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
                "(s3://bucket/path/ grants bucket/path/*): exactly those, nobody else.",
            )
        return role

    def _build_interpreter(self, env: str, name: str, execution_role_arn: str) -> None:
        cid = INTERPRETER_IDS[env]
        network: dict[str, object] = {"networkMode": n.NETWORK_MODE[env]}
        certificates = None
        if n.NETWORK_MODE[env] == "VPC":
            egress = self._shared.egress
            network["vpcConfig"] = {
                "subnets": egress.subnets,
                "securityGroups": [self._build_session_security_group(env, cid, egress).attr_group_id],
            }
            # The proxy CA, installed in every session's OS trust store: the proxy's certificates
            # for allowlisted hosts verify in the session, and nothing else is added.
            certificates = [{"certificateLocation": {"secretArn": egress.ca_cert_arn}}]
        interpreter = agentcore.CfnCodeInterpreterCustom(
            self,
            f"{cid}Interpreter",
            name=name,
            # Always explicit: the L2's default is PUBLIC, which must never be an accident.
            network_configuration=network,
            certificates=certificates,
            execution_role_arn=execution_role_arn,
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

    def _build_session_security_group(self, env: str, cid: str, egress: EgressInputs) -> ec2.CfnSecurityGroup:
        """One group per VPC-mode interpreter: its sessions may open connections to the egress
        proxy's load balancer (the egress VPC, on the proxy port) and to S3 through the gateway
        endpoint, nothing else, and accept none. AgentCore shares an ENI only among interpreters
        with the same subnets and groups, so a group of its own gives this tenant's sessions
        addresses no other tenant's session uses: the proxy's source binding tells them apart."""
        group = ec2.CfnSecurityGroup(
            self,
            f"{cid}SessionSecurityGroup",
            vpc_id=egress.vpc_id,
            group_description=(f"Sessions of tenant {self._tenant.id} ({env}): the egress proxy and S3 only"),
            security_group_egress=[
                ec2.CfnSecurityGroup.EgressProperty(
                    ip_protocol="tcp",
                    from_port=egress.egress.proxy_port,
                    to_port=egress.egress.proxy_port,
                    cidr_ip=egress.egress.egress_cidr,
                    description="The egress proxy's load balancer (through the VPC peering)",
                ),
                ec2.CfnSecurityGroup.EgressProperty(
                    ip_protocol="tcp",
                    from_port=443,
                    to_port=443,
                    destination_prefix_list_id=egress.s3_prefix_list,
                    description="S3 through the sessions VPC's gateway endpoint (tenant data)",
                ),
            ],
            tags=[
                cdk.CfnTag(key="thinkwork:tenant", value=self._tenant.id),
                cdk.CfnTag(key="thinkwork:environment", value=env),
            ],
        )
        self.security_groups[env] = group
        return group

    def _build_egress_policy(self, env: str) -> ssm.CfnParameter:
        """The environment's policy store, written from the config at deploy; `sandboxctl egress
        set` replaces the value at run time and a deploy writes it again only when the config's
        policy changes (CloudFormation updates a parameter whose template value changed)."""
        return ssm.CfnParameter(
            self,
            f"{INTERPRETER_IDS[env]}EgressPolicy",
            name=n.egress_policy_parameter(self._config.name, self._tenant.id, env),
            type="String",
            # Above 4 KB (a long allowlist) the parameter becomes Advanced instead of failing.
            tier="Intelligent-Tiering",
            value=self._tenant.initial_policy(env).to_json(),
            description=f"Egress policy of tenant {self._tenant.id}, environment {env} (the proxy reads it)",
        )

    def _build_substrate(self) -> ssm.CfnParameter:
        # Every value is a plain string or a string token, so json.dumps embeds the tokens and
        # CloudFormation joins them (Fn::Join) exactly as Stack.to_json_string would, one jsii
        # round trip fewer per tenant.
        body = tenant_substrate(
            self._config,
            self._tenant,
            interpreters={env: i.attr_code_interpreter_id for env, i in self.interpreters.items()},
            interpreter_arns={env: i.attr_code_interpreter_arn for env, i in self.interpreters.items()},
            runner_role_arn=self._shared.runner_role_arn,
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
