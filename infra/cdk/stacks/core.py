"""`Sandbox-{stage}-Core`: everything of a stage that does not depend on the tenant list."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct
from sandbox_common import naming as n

from infra.cdk.config import StageConfig
from infra.cdk.constructs.artifacts import ArtifactsConstruct
from infra.cdk.constructs.compute import ComputeConstruct
from infra.cdk.constructs.layer import LayersConstruct
from infra.cdk.constructs.observability import ObservabilityConstruct
from infra.cdk.constructs.parameters import ParametersConstruct
from infra.cdk.constructs.state import StateConstruct


class CoreStack(cdk.Stack):
    def __init__(self, scope: Construct, id_: str, *, config: StageConfig, **kwargs: Any) -> None:
        super().__init__(scope, id_, **kwargs)
        self.state = StateConstruct(self, "State", config=config)
        self.parameters = ParametersConstruct(self, "Parameters", config=config)
        self.layers = LayersConstruct(self, "Layers", config=config)
        self.compute = ComputeConstruct(self, "Compute", config=config, state=self.state, layers=self.layers)
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
        self._build_outputs(config)

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
        for key, value in outputs.items():
            cdk.CfnOutput(self, key, value=value)
