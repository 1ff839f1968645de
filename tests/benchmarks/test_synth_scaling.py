"""Synth cost of many tenants: per-tenant resources are constant, no stack passes 450 resources,
synth time stays linear up to 2,000 tenants, and a tenant costs at most one IAM role, so one
account's default role quota holds ≥ 900 tenants (docs/scale.md)."""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

STACK_RESOURCE_LIMIT = 450
TARGET_LINEARITY = 1.5  # time per tenant at the largest size ÷ at the middle size
DEFAULT_ROLE_QUOTA = 1000  # IAM roles per account, by default
TARGET_TENANTS_AT_DEFAULT_ROLE_QUOTA = 900


def _tenants(count: int, *, data: bool = False) -> tuple[dict, ...]:
    every = ("default-public", "internal-only", "default-allowlist")  # the most resources a tenant costs
    return tuple(
        {
            "id": f"t-{i:04d}",
            "environments": every,
            "templates": {"analyst": "default-public"},
            **({"data": {"read": (f"s3://tenant-data/t-{i:04d}/",)}} if data else {}),
        }
        for i in range(count)
    )


def _synth_once(count: int, *, data: bool = False) -> tuple[float, dict[str, dict]]:
    """Seconds for one synth of `count` tenants, and the templates."""
    from infra.cdk.app_factory import synth_stage

    start = time.perf_counter()
    templates = synth_stage("dev", overrides={"tenants": _tenants(count, data=data)})
    return time.perf_counter() - start, templates


def _count(templates: dict[str, dict], kind: str | None = None) -> int:
    return sum(1 for t in templates.values() for r in t["Resources"].values() if kind in (None, r["Type"]))


def _synth_interleaved(sizes: tuple[int, ...], rounds: int) -> dict[int, tuple[float, dict[str, dict]]]:
    """Median seconds per size over `rounds` round-robin passes: a load swing on this shared
    machine hits every size alike instead of whichever size happened to run during it."""
    samples: dict[int, list[float]] = {size: [] for size in sizes}
    templates: dict[int, dict[str, dict]] = {}
    for _ in range(rounds):
        for size in sizes:
            seconds, templates[size] = _synth_once(size)
            samples[size].append(seconds)
    return {size: (statistics.median(samples[size]), templates[size]) for size in sizes}


def test_synth_scaling_linear_to_2000_tenants_with_at_most_one_role_per_tenant(bench_full: bool) -> None:
    from tests.benchmarks._report import emit

    # Given tenant counts (tiny in smoke mode) and a warmed-up jsii runtime (the first synth of a
    # process pays a one-off start-up cost that is not about tenants)
    sizes = (1, 200, 2000) if bench_full else (1, 4, 12)
    _synth_once(1)
    # When each size is synthesized, interleaved
    runs = _synth_interleaved(sizes, rounds=3 if bench_full else 1)
    base_seconds, base = runs[1]
    per_tenant = {
        count: (_count(t) - _count(base)) / (count - 1) for count, (_, t) in runs.items() if count > 1
    }
    roles_per_tenant = {
        count: (_count(t, "AWS::IAM::Role") - _count(base, "AWS::IAM::Role")) / (count - 1)
        for count, (_, t) in runs.items()
        if count > 1
    }
    # And the same tenants, each with its own data grant (the one thing that costs a tenant a role)
    data_count = sizes[1]
    _, with_data = _synth_once(data_count, data=True)
    _, one_with_data = _synth_once(1, data=True)
    data_roles_per_tenant = (
        _count(with_data, "AWS::IAM::Role") - _count(one_with_data, "AWS::IAM::Role")
    ) / (data_count - 1)
    fixed_roles = _count(base, "AWS::IAM::Role")
    worst = max(data_roles_per_tenant, *roles_per_tenant.values())
    tenants_at_quota = int((DEFAULT_ROLE_QUOTA - fixed_roles) // worst) if worst else None
    largest = max(len(t["Resources"]) for _, ts in runs.values() for t in ts.values())
    middle, top = sizes[1], sizes[2]
    linearity = ((runs[top][0] - base_seconds) / (top - 1)) / (
        (runs[middle][0] - base_seconds) / (middle - 1)
    )
    emit(
        "synth_scaling",
        target=(
            f"time per tenant at {top} ÷ at {middle} <= {TARGET_LINEARITY}; resources per tenant constant; "
            f"largest stack <= {STACK_RESOURCE_LIMIT}; roles per tenant <= 1; tenants at the default role "
            f"quota >= {TARGET_TENANTS_AT_DEFAULT_ROLE_QUOTA}"
        ),
        ratio=linearity,
        seconds={str(c): round(s, 3) for c, (s, _) in runs.items()},
        resources_per_tenant={str(c): v for c, v in per_tenant.items()},
        roles_per_tenant={"without_data": roles_per_tenant[top], "with_data": data_roles_per_tenant},
        stage_fixed_roles=fixed_roles,
        tenants_at_default_role_quota=tenants_at_quota if tenants_at_quota is not None else "unbounded",
        largest_stack_resources=largest,
        stacks={str(c): len(t) for c, (_, t) in runs.items()},
    )
    # Then (always) the shape holds: constant cost per tenant, no stack over the limit, at most one
    # role per tenant (none without data), and the default role quota holds >= 900 tenants
    assert len(set(per_tenant.values())) == 1 and float(next(iter(per_tenant.values()))).is_integer()
    assert largest <= STACK_RESOURCE_LIMIT
    assert set(roles_per_tenant.values()) == {0} and data_roles_per_tenant == 1
    assert tenants_at_quota is not None and tenants_at_quota >= TARGET_TENANTS_AT_DEFAULT_ROLE_QUOTA
    # And at full size synth time stays linear in the tenant count
    if bench_full:
        assert linearity <= TARGET_LINEARITY
