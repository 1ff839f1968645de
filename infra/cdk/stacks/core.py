"""`Sandbox-{stage}-Core`: everything of a stage that does not depend on the tenant list."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct
from sandbox_common import naming as n

from infra.cdk.config import MAX_AVAILABILITY_ZONES, StageConfig
from infra.cdk.constructs.agent_access import AgentAccessConstruct
from infra.cdk.constructs.artifacts import ArtifactsConstruct
from infra.cdk.constructs.compute import ComputeConstruct
from infra.cdk.constructs.egress import EgressConstruct
from infra.cdk.constructs.layer import LayersConstruct
from infra.cdk.constructs.observability import ObservabilityConstruct
from infra.cdk.constructs.parameters import ParametersConstruct
from infra.cdk.constructs.runner_roles import RunnerRolesConstruct
from infra.cdk.constructs.state import StateConstruct
from infra.cdk.function_env import EgressEndpoints


class CoreStack(cdk.Stack):
    def __init__(self, scope: Construct, id_: str, *, config: StageConfig, **kwargs: Any) -> None:
        super().__init__(scope, id_, **kwargs)
        self.state = StateConstruct(self, "State", config=config)
        self.parameters = ParametersConstruct(self, "Parameters", config=config)
        self.layers = LayersConstruct(self, "Layers", config=config)
        self.compute = ComputeConstruct(self, "Compute", config=config, state=self.state, layers=self.layers)
        # One session-runner role and one shared execution role for the whole stage.
        self.runner_roles = RunnerRolesConstruct(
            self,
            "RunnerRoles",
            config=config,
            assumed_by=[self.compute.roles[n.DISPATCH], self.compute.roles[n.REAPER]],
        )
        # Agent runtimes' grants: resource policies, per-tenant aliases, managed policies.
        self.agent_access = AgentAccessConstruct(
            self, "AgentAccess", config=config, dispatch=self.compute.dispatch
        )
        self.artifacts = ArtifactsConstruct(self, "Artifacts", config=config)
        self.artifacts.grant_dispatch(self.compute.roles[n.DISPATCH])
        self.compute.dispatch.add_environment(n.ENV_ARTIFACTS_BUCKET, self.artifacts.bucket.bucket_name)
        self.artifacts.grant_reaper(self.compute.roles[n.REAPER])
        self.compute.functions[n.REAPER].add_environment(
            n.ENV_ARTIFACTS_BUCKET, self.artifacts.bucket.bucket_name
        )
        self.observability = ObservabilityConstruct(
            self, "Observability", config=config, state=self.state, compute=self.compute
        )
        self.egress = self._build_egress(config)
        self._build_outputs(config)

    @property
    def availability_zones(self) -> list[str]:
        """The region's AZs as CloudFormation picks them (Fn::GetAZs), also when the stack knows its
        account and region: CDK would otherwise look them up in the account at synth (a context
        lookup, with credentials) for the egress VPCs."""
        return [cdk.Fn.select(i, cdk.Fn.get_azs()) for i in range(MAX_AVAILABILITY_ZONES)]

    def _build_egress(self, config: StageConfig) -> EgressConstruct | None:
        """The egress path of allowlist environments, if the stage has one; dispatch and the reaper
        hand its endpoints to the sessions they start."""
        if config.egress is None:
            return None
        egress = EgressConstruct(
            self,
            "Egress",
            config=config,
            egress=config.egress,
            tables=self.state.table_names,
            table_arns={logical: table.table_arn for logical, table in self.state.tables.items()},
            runner_role=self.runner_roles.runner_role,
        )
        endpoints = EgressEndpoints(
            proxy_url=egress.proxy_url, ca_bundle=egress.ca_bundle, index_url=egress.index_url
        )
        for function in (self.compute.dispatch, self.compute.reaper):
            for key, value in endpoints.as_env().items():
                function.add_environment(key, value)
        return egress

    def _build_outputs(self, config: StageConfig) -> None:
        """What `sandboxctl` reads on a deployed stage (keys from naming.OUTPUT_*)."""
        outputs = {
            n.OUTPUT_STAGE: config.name,
            n.OUTPUT_DISPATCH_FUNCTION: self.compute.dispatch.function_name,
            n.OUTPUT_QUOTA_FUNCTION: self.compute.quota.function_name,
            n.OUTPUT_AUDIT_DLQ_URL: self.state.audit_dlq.queue_url,
            n.OUTPUT_SECURITY_TOPIC: self.observability.topic.topic_arn,
            n.OUTPUT_ARTIFACTS_BUCKET: self.artifacts.bucket.bucket_name,
            **{n.table_output_key(logical): table.table_name for logical, table in self.state.tables.items()},
        }
        if self.egress is not None:
            outputs[n.OUTPUT_EGRESS_PROXY_URL] = self.egress.proxy_url
            outputs[n.OUTPUT_PACKAGE_INDEX_URL] = self.egress.index_url
        for key, value in outputs.items():
            cdk.CfnOutput(self, key, value=value)
