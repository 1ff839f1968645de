"""`Sandbox-{stage}-TenantsNNN`: the per-tenant resources of one shard of tenants.

Tenants are sharded in config order, `tenants_per_shard` each, so appending a tenant changes only
the last shard (or adds a new one) and no stack approaches the CloudFormation resource limit.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from constructs import Construct

from infra.cdk.config import StageConfig, TenantConfig
from infra.cdk.constructs.observability import alarm_action_arns
from infra.cdk.constructs.tenant import ShardShared, TenantConstruct


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
        shared = ShardShared(self, config, alarm_action_arns(self, config))
        self.tenants: dict[str, TenantConstruct] = {
            t.id: TenantConstruct(self, f"Tenant-{t.id}", config=config, tenant=t, shared=shared)
            for t in tenants
        }
