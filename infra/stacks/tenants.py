"""`Sandbox-{stage}-TenantsNNN`: the per-tenant resources of one shard of tenants.

Tenants are sharded in config order, `tenants_per_shard` each, so appending a tenant changes only
the last shard (or adds a new one) and no stack approaches the CloudFormation resource limit.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_sns as sns
from constructs import Construct

from infra.config import StageConfig, TenantConfig
from infra.constructs.observability import alarm_actions, security_topic_arn
from infra.constructs.tenant import ShardPrincipals, TenantConstruct


class TenantShardStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: StageConfig,
        tenants: tuple[TenantConfig, ...],
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id_, **kwargs)
        topic = sns.Topic.from_topic_arn(self, "SecurityAlerts", security_topic_arn(self, config.name))
        actions = alarm_actions(self, config, topic)
        principals = ShardPrincipals(self, config.name)
        self.tenants: dict[str, TenantConstruct] = {
            t.id: TenantConstruct(self, f"Tenant-{t.id}", config=config, tenant=t, alarm_actions=actions,
                                  principals=principals)  # fmt: skip
            for t in tenants
        }
