"""May a tenant use a sandbox at all? The tenant-wide half of pre-flight, read by dispatch and the
reaper (through `sandbox_runtime.preflight`) and by the egress proxy (a disabled tenant's egress
closes).

Sources, read here without caching (each caller caches as its own freshness rule says):
- the tenant's substrate JSON in SSM (published by its shard stack: tier, templates, interpreter
  ids, runner role) — config defaults;
- the TENANTS table's policy item (`sandbox_enabled`, `compliance_tier`), written by sandboxctl —
  it wins over the defaults.

Every read failure raises `TenantStateUnavailable`: callers fail closed (or, for admitted work,
log the doubt), never read an unreadable answer as "no policy".
"""

from __future__ import annotations

import json
from typing import Any

from . import naming as n
from .models import TenantSubstrate


class TenantStateUnavailable(Exception):
    """A read of the tenant's substrate or policy failed; callers fail closed."""


def enabled(substrate: TenantSubstrate | None, policy: dict[str, Any] | None) -> bool:
    """May the tenant use a sandbox at all: known, on the standard tier, and not switched off by
    the operator (`sandbox_enabled`, default on for the standard tier)."""
    if substrate is None and policy is None:
        return False  # unknown tenant
    tier = (policy or {}).get("compliance_tier") or (substrate.compliance_tier if substrate else "standard")
    on = (policy or {}).get("sandbox_enabled")
    if on is None:
        on = tier == "standard"
    return bool(on) and tier == "standard"


def read_substrate(ssm: Any, stage: str, tenant_id: str) -> TenantSubstrate | None:
    """The tenant's published substrate, or None when it has none (an unknown tenant)."""
    from botocore.exceptions import ClientError

    try:
        raw = ssm.get_parameter(Name=n.tenant_substrate_parameter(stage, tenant_id))
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ParameterNotFound":
            return None
        raise TenantStateUnavailable(f"ssm:{exc.response.get('Error', {}).get('Code')}") from None
    except Exception as exc:  # noqa: BLE001 — endpoint errors, timeouts
        raise TenantStateUnavailable(f"ssm:{type(exc).__name__}") from None
    try:
        return TenantSubstrate.model_validate(json.loads(raw["Parameter"]["Value"]))
    except (KeyError, TypeError, ValueError):  # unreadable answer or value: fail closed
        raise TenantStateUnavailable("substrate parameter unreadable") from None


def read_policy(ddb: Any, tenants_table: str, tenant_id: str) -> dict[str, Any] | None:
    """The operator's policy item of the tenant (plain values), or None when there is none."""
    from boto3.dynamodb.types import TypeDeserializer

    key = n.TENANTS.key(tenant_id, n.TENANT_POLICY_ITEM)
    try:
        out = ddb.get_item(TableName=tenants_table, Key=key, ConsistentRead=True)
    except Exception as exc:  # noqa: BLE001
        raise TenantStateUnavailable(f"tenants:{type(exc).__name__}") from None
    item = out.get("Item")
    if item is None:
        return None
    deser = TypeDeserializer()
    return {k: deser.deserialize(v) for k, v in item.items()}


def tenant_enabled(*, ssm: Any, ddb: Any, stage: str, tenants_table: str, tenant_id: str) -> bool:
    """`enabled` from fresh reads of both sources; raises TenantStateUnavailable."""
    return enabled(read_substrate(ssm, stage, tenant_id), read_policy(ddb, tenants_table, tenant_id))
