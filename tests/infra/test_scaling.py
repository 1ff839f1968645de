"""Many tenants: shards keep every stack under 450 resources, and appending a tenant
changes exactly one shard's template."""

from __future__ import annotations

import pytest
from sandbox_common import naming as n

from infra.cdk.config import StageConfig

STACK_RESOURCE_LIMIT = 450


def _tenants(count: int, *, every_env: bool = True, data: bool = False) -> tuple[dict, ...]:
    # every environment and a data grant: the most resources a tenant costs (the allowlist
    # environment adds its security group and policy parameter, a data grant its execution role)
    envs = ("default-public", "internal-only", "default-allowlist") if every_env else ("default-public",)
    return tuple(
        {
            "id": f"tenant-{i:04d}",
            "environments": envs,
            "templates": {"analyst": "default-public"},
            **({"data": {"read": (f"s3://tenant-data/tenant-{i:04d}/",)}} if data else {}),
        }
        for i in range(count)
    )


def _resource_counts(templates) -> dict[str, int]:
    return {name: len(t["Resources"]) for name, t in templates.items()}


def test_synth_stage_200_tenants_keeps_every_stack_under_450_resources() -> None:
    from infra.cdk.app_factory import synth_stage

    # Given 200 tenants, each with every environment (the most resources per tenant)
    overrides = {"tenants": _tenants(200)}
    # When the stage is synthesized
    templates = synth_stage("dev", overrides=overrides)
    counts = _resource_counts(templates)
    # Then no stack is over the limit, and every full shard costs the same per tenant
    assert max(counts.values()) <= STACK_RESOURCE_LIMIT, counts
    per_shard = StageConfig.model_fields["tenants_per_shard"].default
    assert len(counts) == 1 + -(-200 // per_shard)
    shard_counts = {counts[n.shard_stack_name("dev", i)] for i in range(200 // per_shard)}
    assert len(shard_counts) == 1


def test_tenants_per_shard_ceiling_fits_the_stack_limit() -> None:
    from infra.cdk.app_factory import synth_stage

    # Given one shard at the largest allowed size, every tenant with every environment and data
    ceiling = StageConfig.model_fields["tenants_per_shard"].metadata
    max_per_shard = next(m.le for m in ceiling if hasattr(m, "le"))
    templates = synth_stage(
        "dev", overrides={"tenants": _tenants(2, data=True), "tenants_per_shard": max_per_shard}
    )
    # When the per-tenant cost is measured from a real shard
    shard = templates[n.shard_stack_name("dev", 0)]
    per_tenant = sum(1 for r in shard["Resources"] if "tenant0000" in r.lower())
    fixed = len(shard["Resources"]) - 2 * per_tenant
    # Then a full shard stays under the limit with headroom
    assert fixed + max_per_shard * per_tenant <= STACK_RESOURCE_LIMIT - 50, (fixed, per_tenant)


def test_compose_refuses_a_stack_over_450_resources() -> None:
    import aws_cdk as cdk

    from infra.cdk.app_factory import _check_resource_count
    from infra.cdk.config import ConfigError

    # Given a stack at the limit (whatever made it so: tenants, environments, data)
    stack = cdk.Stack(cdk.App(), "Big")
    for i in range(STACK_RESOURCE_LIMIT):
        cdk.CfnResource(stack, f"R{i}", type="AWS::SNS::Topic")
    _check_resource_count("Big", stack)  # passes
    # When one more resource is added / Then synth stops, naming the stack and what to lower
    cdk.CfnResource(stack, "OneMore", type="AWS::SNS::Topic")
    with pytest.raises(ConfigError, match=r"stack Big would have 451 resources .*lower tenants_per_shard"):
        _check_resource_count("Big", stack)


def test_appending_a_tenant_changes_exactly_one_shard_template() -> None:
    from infra.cdk.app_factory import synth_stage

    # Given a stage with 5 tenants in shards of 2, and the same stage with a 6th appended
    before = synth_stage("dev", overrides={"tenants": _tenants(5, every_env=False), "tenants_per_shard": 2})
    after = synth_stage("dev", overrides={"tenants": _tenants(6, every_env=False), "tenants_per_shard": 2})
    # When the templates are compared stack by stack
    changed = {name for name in after if before.get(name) != after[name]}
    # Then only the last shard differs: the core stack and the other shards are untouched
    assert set(before) == set(after)
    assert changed == {n.shard_stack_name("dev", 2)}
