"""The kill switch's own reaper run: when a change that may kill a tenant is announced, its
admitted work stops now, not at the next scheduled run (docs/jobs.md, docs/circuit-breakers.md).

Three events announce a change, all answered by `run` with the tenants they name:
- `{"kill_switch": {"tenant_id": T}}` (`{}` inside: every tenant), sent by `sandboxctl caps set`
  and `sandboxctl tenant disable|set-tier` when the change kills;
- an EventBridge `Parameter Store Change` of a caps parameter (any change, made by anyone: a
  tenant's override names that tenant, a stage-wide value every tenant);
- a batch of the tenants table's stream records (any write of a tenant's policy item).

For each tenant named, the kill switch is read fresh (not from the container's cache): a tenant
that is not killed after all (a cap raised, a tenant enabled) is left alone. A killed tenant's
running background jobs are cancelled through the job sweep's own code (`reason: "kill_switch"`,
one row each, nothing counted again) and its warm pools are emptied (the refill of each pool).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from sandbox_common import naming as n
from sandbox_runtime.job_end import finish_due_jobs

from . import job_sweep
from .service import Reaper

# Open jobs looked at in one run (a kill is rare; the job sweep's own bound is for every run).
MAX_JOBS = 10_000
PARAMETER_STORE_CHANGE = "Parameter Store Change"


@dataclass(frozen=True)
class KillScope:
    """The tenants a change may kill; None: every tenant (a stage-wide cap changed)."""

    tenants: tuple[str, ...] | None


def scope_of(event: Any, stage: str) -> KillScope | None:
    """The tenants the event names, or None when it is no kill-switch event (or names nothing a
    tenant id may be: hostile input is dropped, never used in a path or a key)."""
    if not isinstance(event, dict):
        return None
    if isinstance(event.get(n.KILL_SWITCH_EVENT_KEY), dict):
        tenant = event[n.KILL_SWITCH_EVENT_KEY].get("tenant_id")
        if tenant is None:
            return KillScope(None)
        return KillScope((tenant,)) if _tenant_id(tenant) else None
    if event.get("source") == "aws.ssm" and event.get("detail-type") == PARAMETER_STORE_CHANGE:
        name = (event.get("detail") or {}).get("name")
        return _parameter_scope(name, stage) if isinstance(name, str) else None
    records = event.get("Records")
    if isinstance(records, list) and records:
        tenants = sorted({t for t in map(_policy_tenant, records) if t is not None})
        return KillScope(tuple(tenants)) if tenants else None
    return None


def _tenant_id(value: Any) -> bool:
    return isinstance(value, str) and bool(n.REQUEST_ID_RE.match(value))


def _parameter_scope(name: str, stage: str) -> KillScope | None:
    caps = f"{n.ssm_prefix(stage)}/caps/"
    if not name.startswith(caps):
        return None
    rest = name[len(caps) :]
    if not rest.startswith("tenants/"):
        return KillScope(None)  # a stage-wide cap: every tenant
    tenant = rest[len("tenants/") :].partition("/")[0]
    return KillScope((tenant,)) if _tenant_id(tenant) else None


def _policy_tenant(record: Any) -> str | None:
    """The tenant of a stream record that writes a tenant's policy item, else None."""
    if not isinstance(record, dict) or record.get("eventSource") != "aws:dynamodb":
        return None
    keys = (record.get("dynamodb") or {}).get("Keys") or {}
    item = (keys.get(n.TENANTS.sort_key) or {}).get("S")
    tenant = (keys.get(n.TENANTS.pk) or {}).get("S")
    return tenant if item == n.TENANT_POLICY_ITEM and _tenant_id(tenant) else None


def run(r: Reaper, scope: KillScope) -> dict[str, Any]:
    """Cancel the running jobs and empty the warm pools of every tenant of `scope` that the kill
    switch, read now, says is killed. Returns the run's summary (its log line)."""
    deps = job_sweep.job_deps(r)
    named = scope.tenants if scope.tenants is not None else _tenants_with_work(r, deps)
    killed = sorted(t for t in named if r.kill_switch.check(t, fresh=True) is not None)
    # The job sweep's observers ask the kill switch again: its cache now holds what was just read.
    ended = finish_due_jobs(deps, limit=MAX_JOBS, tenants=set(killed).__contains__) if killed else []
    pools = {}
    for tenant in killed:
        for environment in n.ENVIRONMENTS:
            report = r.run(refill_only=(tenant, environment))["refill"]
            if report["trimmed"]:
                pools[f"{tenant}#{environment}"] = report["trimmed"]
    return {
        "tenants": list(named),
        "killed": killed,
        "ended": len(ended),
        "by_status": dict(Counter(status for _, status in ended)),
        "warm_trimmed": pools,
    }


def _tenants_with_work(r: Reaper, deps: Any) -> tuple[str, ...]:
    """Every tenant with a job not yet final or a warm session: what a stage-wide cap may stop."""
    jobs = {record.tenant_id for record in deps.store.open_jobs(limit=MAX_JOBS)}
    warm = {slot.tenant_id for slot in r.ledger.slots() if slot.source == "warm"}
    return tuple(sorted(jobs | warm))
