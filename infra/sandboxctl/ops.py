"""The operations behind each `sandboxctl` command, as functions over a `Target` returning plain
data (the CLI renders it; the demo and the pilot call the same functions). Failures an operator
can act on raise `CtlError` with a one-line reason.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError
from sandbox_common import dimensions, limits
from sandbox_common import naming as n
from sandbox_common.tool_spec import validate_tool_names
from sandbox_common.windows import Windows, iso_z, iso_z_ms, utc_now

from infra.sandboxctl.errors import CtlError
from infra.sandboxctl.items import error_code, paged_items, parameter_value, serialize
from infra.sandboxctl.target import Target

if TYPE_CHECKING:
    from sandbox_common.models import TenantSubstrate


# --- invoke ----------------------------------------------------------------------------------
def invoke(target: Target, event: dict[str, Any] | str) -> dict[str, Any]:
    payload = event if isinstance(event, str) else json.dumps(event)
    try:
        out = target.client("lambda").invoke(
            FunctionName=target.dispatch_function, InvocationType="RequestResponse", Payload=payload.encode()
        )
    except ClientError as exc:
        raise CtlError(f"invoking {target.dispatch_function} failed: {error_code(exc)}: {exc}") from None
    body = out["Payload"].read()
    if out.get("FunctionError"):
        try:
            err = json.loads(body)
            detail = f"{err.get('errorType')}: {err.get('errorMessage')}"
        except ValueError:
            detail = body.decode("utf-8", "replace")[:300]
        raise CtlError(f"dispatch raised an unhandled error: {' '.join(detail.split())}")
    try:
        result = json.loads(body)
    except ValueError:
        raise CtlError("dispatch returned a response that is not JSON") from None
    if not isinstance(result, dict):
        raise CtlError("dispatch returned a response that is not a JSON object")
    return result


# --- tenants ---------------------------------------------------------------------------------
def substrate(target: Target, tenant_id: str) -> TenantSubstrate | None:
    try:
        raw = target.client("ssm").get_parameter(Name=n.tenant_substrate_parameter(target.stage, tenant_id))
    except ClientError as exc:
        if error_code(exc) == "ParameterNotFound":
            return None
        raise
    # Imported here for the CLI's start-up: the everyday commands do not load pydantic.
    from sandbox_common.models import TenantSubstrate

    return TenantSubstrate.model_validate(json.loads(raw["Parameter"]["Value"]))


def _tenant_items(target: Target, tenant_id: str) -> list[dict[str, Any]]:
    return list(
        paged_items(
            target,
            "query",
            TableName=target.table(n.TENANTS),
            KeyConditionExpression="#pk = :t",
            ExpressionAttributeNames={"#pk": n.TENANTS.pk},
            ExpressionAttributeValues={":t": {"S": tenant_id}},
            ConsistentRead=True,
        )
    )


def tenant_show(target: Target, tenant_id: str, *, history: int = 10) -> dict[str, Any]:
    sub = substrate(target, tenant_id)
    items = _tenant_items(target, tenant_id)
    policy = next((i for i in items if i[n.TENANTS.sort_key] == n.TENANT_POLICY_ITEM), None)
    if sub is None and policy is None:
        raise CtlError(f"unknown tenant {tenant_id!r} in stage {target.stage!r}")
    tier = (policy or {}).get("compliance_tier") or (sub.compliance_tier if sub else "standard")
    enabled = (policy or {}).get("sandbox_enabled")
    # Same rule as dispatch pre-flight: no policy item = enabled iff the tier is standard.
    effective_enabled = (tier == "standard") if enabled is None else (bool(enabled) and tier == "standard")
    templates: dict[str, Any] = {
        t: {"environment": e, "source": "config"} for t, e in (sub.templates if sub else {}).items()
    }
    for item in items:
        if item[n.TENANTS.sort_key].startswith(n.TEMPLATE_ITEM_PREFIX):
            name = item[n.TENANTS.sort_key][len(n.TEMPLATE_ITEM_PREFIX) :]
            templates[name] = {
                "environment": item.get("environment"),
                "tools": list(item.get(n.TEMPLATE_TOOLS_ATTRIBUTE) or []),
                "source": "operator",
                "updated_by": item.get("updated_by"),
                "updated_at": item.get("updated_at"),
            }
    changes = sorted(
        (i for i in items if i[n.TENANTS.sort_key].startswith(n.HISTORY_ITEM_PREFIX)),
        key=lambda i: i[n.TENANTS.sort_key],
    )
    return {
        "tenant_id": tenant_id,
        "sandbox_enabled": effective_enabled,
        "compliance_tier": tier,
        "policy": policy,
        "environments": list(sub.environments) if sub else [],
        "interpreters": dict(sub.interpreters) if sub else {},
        "templates": templates,
        "history": changes[-history:],
    }


def _write_with_history(target: Target, tenant_id: str, item: dict[str, Any], change: dict[str, Any]) -> None:
    """The item and its history entry commit together (a change is never unrecorded)."""
    now = utc_now()
    who = target.caller_identity()
    stamp = {"updated_by": who, "updated_at": iso_z_ms(now)}
    history = {
        n.TENANTS.pk: tenant_id,
        n.TENANTS.sort_key: f"{n.HISTORY_ITEM_PREFIX}{iso_z_ms(now)}#{uuid.uuid4().hex[:8]}",
        "changed_by": who,
        "changed_at": iso_z_ms(now),
        **change,
    }
    target.client("dynamodb").transact_write_items(
        TransactItems=[
            {"Put": {"TableName": target.table(n.TENANTS), "Item": serialize({**item, **stamp})}},
            {
                "Put": {
                    "TableName": target.table(n.TENANTS),
                    "Item": serialize(history),
                    "ConditionExpression": "attribute_not_exists(#sk)",
                    "ExpressionAttributeNames": {"#sk": n.TENANTS.sort_key},
                }
            },
        ]
    )


def tenant_set(
    target: Target, tenant_id: str, *, enabled: bool | None = None, tier: str | None = None
) -> dict[str, Any]:
    current = tenant_show(target, tenant_id, history=0)
    new_tier = tier or current["compliance_tier"]
    if enabled is True and new_tier != "standard":
        raise CtlError(
            f"refused: tenant {tenant_id!r} is on the {new_tier!r} tier; only 'standard' tenants can use the"
            " sandbox"
        )
    new_enabled = current["sandbox_enabled"] if enabled is None else enabled
    if new_tier != "standard":
        new_enabled = False  # moving to a non-standard tier disables the sandbox
    action = "enable" if enabled is True else "disable" if enabled is False else f"set-tier {new_tier}"
    before = {"sandbox_enabled": current["sandbox_enabled"], "compliance_tier": current["compliance_tier"]}
    after = {"sandbox_enabled": new_enabled, "compliance_tier": new_tier}
    policy = {n.TENANTS.pk: tenant_id, n.TENANTS.sort_key: n.TENANT_POLICY_ITEM, **after}
    _write_with_history(target, tenant_id, policy, {"action": action, "before": before, "after": after})
    done = {"tenant_id": tenant_id, "action": action, "before": before, "after": after}
    if not new_enabled:  # the tenant's running jobs and warm sessions stop now, not at the next run
        done[n.KILL_SWITCH_EVENT_KEY] = kill_switch_now(target, tenant_id)
    return done


def template_put(
    target: Target, tenant_id: str, template_id: str, environment: str, tools: Sequence[str] | None = None
) -> dict[str, Any]:
    """`tools`: the agent tools the template's code may call; None keeps the current
    allowlist, () clears it."""
    current = tenant_show(target, tenant_id, history=0)
    env = None if environment == "none" else environment
    if env is not None and env not in current["environments"]:
        have = ", ".join(current["environments"]) or "none"
        raise CtlError(f"refused: tenant {tenant_id!r} has no {env!r} environment (it has: {have})")
    existing = current["templates"].get(template_id, {})
    before = existing.get("environment")
    tools_before = list(existing.get("tools") or [])
    try:
        tools_after = list(validate_tool_names(tools_before if tools is None else tools))
    except ValueError as exc:
        raise CtlError(f"refused: {exc}") from None
    item: dict[str, Any] = {
        n.TENANTS.pk: tenant_id,
        n.TENANTS.sort_key: n.TEMPLATE_ITEM_PREFIX + template_id,
        "environment": env,
    }
    if tools_after:
        item[n.TEMPLATE_TOOLS_ATTRIBUTE] = tools_after
    change = {
        "action": f"template put {template_id}",
        "before": {"environment": before, "tools": tools_before},
        "after": {"environment": env, "tools": tools_after},
    }
    _write_with_history(target, tenant_id, item, change)
    return {
        "tenant_id": tenant_id,
        "template_id": template_id,
        "environment": env,
        "previous": before,
        "tools": tools_after,
        "previous_tools": tools_before,
    }


def require_known_tenant(target: Target, tenant_id: str) -> None:
    tenant_show(target, tenant_id, history=0)


# --- caps ------------------------------------------------------------------------------------
def _cap_value(raw: str) -> int | str:
    return int(raw) if raw.isascii() and raw.isdigit() else raw  # an invalid value is shown as is


def caps_get(target: Target, tenant_id: str | None = None) -> dict[str, Any]:
    ssm = target.client("ssm")
    prefix = f"{n.ssm_prefix(target.stage)}/caps"
    values: dict[str, str] = {}
    kwargs: dict[str, Any] = {"Path": prefix, "Recursive": True}
    while True:
        page = ssm.get_parameters_by_path(**kwargs)
        values.update({p["Name"]: p["Value"] for p in page.get("Parameters", [])})
        if not page.get("NextToken"):
            break
        kwargs["NextToken"] = page["NextToken"]
    names = dimensions.names()
    result: dict[str, Any] = {
        "global": {
            d: (
                _cap_value(values[_cap_path(target.stage, d, None)])
                if _cap_path(target.stage, d, None) in values
                else None
            )
            for d in names
        },
        "overrides": {},
    }
    override_prefix = f"{prefix}/tenants/"  # dimensions.Dimension.parameter's override paths
    for name, value in sorted(values.items()):
        if name.startswith(override_prefix):
            tenant, _, dimension = name[len(override_prefix) :].partition("/")
            if dimension in names:
                result["overrides"].setdefault(tenant, {})[dimension] = _cap_value(value)
    if tenant_id is not None:
        own = result["overrides"].get(tenant_id, {})
        result["tenant_id"] = tenant_id
        result["effective"] = {d: own.get(d, result["global"][d]) for d in names}
    return result


def _cap_path(stage: str, dimension: str, tenant_id: str | None) -> str:
    """A cap dimension's SSM path; a stage-wide one has no per-tenant override."""
    found = dimensions.get(dimension)
    if found is None:
        raise CtlError(f"refused: {dimension!r} is not a cap dimension ({', '.join(dimensions.names())})")
    if tenant_id is not None and not found.per_tenant:
        raise CtlError(f"refused: {dimension} is stage-wide; it has no per-tenant override (drop --tenant)")
    return found.parameter(stage, tenant_id)


def caps_set(target: Target, dimension: str, value: int, tenant_id: str | None = None) -> dict[str, Any]:
    if value < 0:
        raise CtlError(f"refused: {value} is negative; caps are non-negative integers")
    name = _cap_path(target.stage, dimension, tenant_id)
    if tenant_id is not None:
        require_known_tenant(target, tenant_id)
    ssm = target.client("ssm")
    previous = parameter_value(ssm, name)
    ssm.put_parameter(Name=name, Value=str(value), Type="String", Overwrite=True)
    done = {"parameter": name, "value": value, "previous": None if previous is None else _cap_value(previous)}
    found = dimensions.get(dimension)
    if value == 0 and found is not None and found.kind is dimensions.Kind.CALLS:
        # the kill switch: the scope's running jobs and warm sessions stop now
        done[n.KILL_SWITCH_EVENT_KEY] = kill_switch_now(target, tenant_id)
    return done


_SCHEDULED_KILL = (
    f"the reaper's next scheduled run (every {limits.REAPER_SCHEDULE_MINUTES} minutes), or the next call"
    " of the tenant that looks, stops its running jobs"
)


def kill_switch_now(target: Target, tenant_id: str | None) -> str:
    """Ask the stage's reaper to stop the admitted work of `tenant_id` (None: every tenant) now,
    off the CLI's path (an asynchronous invoke with its kill-switch event): "started", or why not.
    The reaper reads the kill switch afresh, so an ask that turns out not to kill stops nothing."""
    if not target.reaper_function:
        return f"not started (no reaper known); {_SCHEDULED_KILL}"
    scope = {} if tenant_id is None else {"tenant_id": tenant_id}
    try:
        target.client("lambda").invoke(
            FunctionName=target.reaper_function,
            InvocationType="Event",
            Payload=json.dumps({n.KILL_SWITCH_EVENT_KEY: scope}).encode(),
        )
    except (ClientError, BotoCoreError) as exc:
        code = error_code(exc) if isinstance(exc, ClientError) else type(exc).__name__
        return f"not started ({code}); {_SCHEDULED_KILL}"
    return "started"


def caps_unset(target: Target, dimension: str, tenant_id: str) -> dict[str, Any]:
    name = _cap_path(target.stage, dimension, tenant_id)
    try:
        target.client("ssm").delete_parameter(Name=name)
    except ClientError as exc:
        if error_code(exc) != "ParameterNotFound":
            raise
        return {"parameter": name, "deleted": False}
    return {"parameter": name, "deleted": True}


# --- counters --------------------------------------------------------------------------------
def counters_show(target: Target, tenant_id: str, agent_id: str | None = None) -> dict[str, Any]:
    windows = Windows.at(utc_now())  # one clock read for every key and reset time
    ddb = target.client("dynamodb")

    def count(spec: n.TableSpec, key: str) -> int:
        item = ddb.get_item(TableName=target.table(spec), Key=spec.key(key), ConsistentRead=True).get("Item")
        return int(item[n.COUNTER_ATTR_COUNT]["N"]) if item and n.COUNTER_ATTR_COUNT in item else 0

    caps = caps_get(target, tenant_id)["effective"]
    result: dict[str, Any] = {"tenant_id": tenant_id, "now": iso_z(windows.now)}
    for d in dimensions.calls():
        assert d.table is not None  # a calls dimension's
        resets_at, window = iso_z(d.resets_at(windows)), d.window_label(windows)
        if n.COUNTER_ATTR_AGENT not in d.key:
            key = d.counter_key({n.COUNTER_ATTR_TENANT: tenant_id}, windows)
            result[d.name] = {"window": window, "count": count(d.table, key), "cap": caps[d.name]}
            result[d.name]["resets_at"] = resets_at
            continue
        if agent_id is not None:
            key = d.counter_key({n.COUNTER_ATTR_TENANT: tenant_id, n.COUNTER_ATTR_AGENT: agent_id}, windows)
            agents = {agent_id: count(d.table, key)}
        else:
            # An agent's key is tenant#agent#...#window: list this tenant's agents in the current window.
            agents = {
                str(item.get(n.COUNTER_ATTR_AGENT)): int(item.get(n.COUNTER_ATTR_COUNT, 0))
                for item in paged_items(
                    target,
                    "scan",
                    TableName=target.table(d.table),
                    FilterExpression="begins_with(#k, :p) AND #w = :w AND attribute_exists(#a)",
                    ExpressionAttributeNames={
                        "#k": d.table.pk,
                        "#w": n.COUNTER_ATTR_WINDOW,
                        "#a": n.COUNTER_ATTR_AGENT,
                    },
                    ExpressionAttributeValues={":p": {"S": f"{tenant_id}#"}, ":w": {"S": window}},
                    ConsistentRead=True,
                )
            }
        result[d.name] = [
            {"agent_id": a, "window": window, "count": c, "cap": caps[d.name]}
            for a, c in sorted(agents.items())
        ]
        result[f"{d.name}_cap"], result[f"{d.name}_resets_at"] = caps[d.name], resets_at
    for d in dimensions.byte_counts():  # counted by the egress proxy, one item per tenant and window
        assert d.table is not None
        key = d.counter_key({n.COUNTER_ATTR_TENANT: tenant_id}, windows)
        item = ddb.get_item(TableName=target.table(d.table), Key=d.table.key(key), ConsistentRead=True)
        counted = (item.get("Item") or {}).get(n.COUNTER_ATTR_BYTES, {}).get("N")
        result[d.name] = {
            "window": d.window_label(windows),
            "count": int(counted) if counted is not None else 0,
            "cap": caps[d.name],
            "resets_at": iso_z(d.resets_at(windows)),
        }
    return result


def counter_rows(counters: dict[str, Any]) -> list[dict[str, Any]]:
    """`counters_show`'s answer as table rows: one per counter (dimension, key, window, count, cap,
    resets_at)."""
    rows: list[dict[str, Any]] = []
    for d in (*dimensions.calls(), *dimensions.byte_counts()):
        shown = counters[d.name]
        if isinstance(shown, dict):
            rows.append({"dimension": d.name, "key": counters["tenant_id"], **shown})
        else:
            resets_at = counters[f"{d.name}_resets_at"]
            rows += [{"dimension": d.name, "key": a["agent_id"], **a, "resets_at": resets_at} for a in shown]
    return rows
