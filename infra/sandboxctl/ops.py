"""The operations behind each `sandboxctl` command, as functions over a `Target` returning plain
data (the CLI renders it; the demo and the pilot call the same functions). Failures an operator
can act on raise `CtlError` with a one-line reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import chain, islice
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError
from sandbox_common import dimensions, limits
from sandbox_common import naming as n
from sandbox_common.audit import AuditWriter, drain_spool
from sandbox_common.tool_spec import validate_tool_names
from sandbox_common.windows import Windows, iso_z, iso_z_ms, utc_now

from infra.sandboxctl.errors import CtlError
from infra.sandboxctl.target import Target

if TYPE_CHECKING:
    from sandbox_common.models import TenantSubstrate


# --- helpers ---------------------------------------------------------------------------------
def plain(value: Any) -> Any:
    """DynamoDB values as JSON-friendly Python (Decimal -> int/float, sets -> sorted lists)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(plain(v) for v in value)
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    return value


def _deserialize(item: dict[str, Any]) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeDeserializer

    deser = TypeDeserializer()
    return {k: plain(deser.deserialize(v)) for k, v in item.items()}


def _items(target: Target, operation: str, **request: Any) -> Iterator[dict[str, Any]]:
    """Deserialized items of a DynamoDB Query or Scan across all its pages (botocore's
    paginator, read lazily: a caller that stops early fetches no further page)."""
    for page in target.client("dynamodb").get_paginator(operation).paginate(**request):
        for raw in page.get("Items", []):
            yield _deserialize(raw)


def _serialize(item: dict[str, Any]) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeSerializer

    ser = TypeSerializer()
    return {k: ser.serialize(_to_dynamo(v)) for k, v in item.items()}


def _to_dynamo(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, dict):
        return {k: _to_dynamo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_dynamo(v) for v in value]
    return value


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def parse_time(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# --- invoke ----------------------------------------------------------------------------------
def invoke(target: Target, event: dict[str, Any] | str) -> dict[str, Any]:
    payload = event if isinstance(event, str) else json.dumps(event)
    try:
        out = target.client("lambda").invoke(
            FunctionName=target.dispatch_function, InvocationType="RequestResponse", Payload=payload.encode()
        )
    except ClientError as exc:
        raise CtlError(f"invoking {target.dispatch_function} failed: {_code(exc)}: {exc}") from None
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
        if _code(exc) == "ParameterNotFound":
            return None
        raise
    # Imported here for the CLI's start-up: the everyday commands do not load pydantic.
    from sandbox_common.models import TenantSubstrate

    return TenantSubstrate.model_validate(json.loads(raw["Parameter"]["Value"]))


def _tenant_items(target: Target, tenant_id: str) -> list[dict[str, Any]]:
    return list(
        _items(
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
            {"Put": {"TableName": target.table(n.TENANTS), "Item": _serialize({**item, **stamp})}},
            {
                "Put": {
                    "TableName": target.table(n.TENANTS),
                    "Item": _serialize(history),
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
    """`tools` (SPEC §15): the agent tools the template's code may call; None keeps the current
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
    """A cap dimension's SSM path (§5.2, §16.2); a stage-wide one has no per-tenant override."""
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
    try:
        previous: str | None = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except ClientError as exc:
        if _code(exc) != "ParameterNotFound":
            raise
        previous = None
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
        code = _code(exc) if isinstance(exc, ClientError) else type(exc).__name__
        return f"not started ({code}); {_SCHEDULED_KILL}"
    return "started"


def caps_unset(target: Target, dimension: str, tenant_id: str) -> dict[str, Any]:
    name = _cap_path(target.stage, dimension, tenant_id)
    try:
        target.client("ssm").delete_parameter(Name=name)
    except ClientError as exc:
        if _code(exc) != "ParameterNotFound":
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
                for item in _items(
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


# --- audit -----------------------------------------------------------------------------------
def audit_list(
    target: Target,
    tenant_id: str,
    *,
    agent_id: str | None = None,
    session_id: str | None = None,
    since: str | None = None,
    limit: int = 20,
) -> list[dict[str, Any]]:
    index = n.INVOCATIONS_BY_SESSION if session_id else n.INVOCATIONS_BY_TENANT_TIME
    names = {"#pk": index.pk}
    pk_value = session_id if session_id else tenant_id
    values: dict[str, Any] = {":pk": {"S": pk_value}}
    key = "#pk = :pk"
    if since:
        names["#st"] = str(index.sk)
        values[":since"] = {"S": iso_z_ms(parse_time(since))}
        key += " AND #st >= :since"
    filters = []
    if session_id:  # a session id never reveals another tenant's rows
        names["#t"] = "tenant_id"
        values[":t"] = {"S": tenant_id}
        filters.append("#t = :t")
    if agent_id:
        names["#a"] = "agent_id"
        values[":a"] = {"S": agent_id}
        filters.append("#a = :a")
    kwargs: dict[str, Any] = {
        "TableName": target.table(n.INVOCATIONS),
        "IndexName": index.name,
        "KeyConditionExpression": key,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ScanIndexForward": False,
    }
    if filters:
        kwargs["FilterExpression"] = " AND ".join(filters)
    return list(islice(_items(target, "query", **kwargs), limit))


def audit_get(target: Target, invocation_id: str) -> dict[str, Any] | None:
    item = (
        target.client("dynamodb")
        .get_item(
            TableName=target.table(n.INVOCATIONS),
            Key=n.INVOCATIONS.key(invocation_id),
            ConsistentRead=True,
        )
        .get("Item")
    )
    return _deserialize(item) if item else None


def audit_replay(target: Target, *, max_messages: int = 10_000) -> dict[str, Any]:
    """Drain the audit DLQ exactly once: a row already in the table (an earlier replay, or the
    original write that only looked failed) is a duplicate, and its message is deleted too."""
    sqs, ddb = target.client("sqs"), target.client("dynamodb")
    counts = {"replayed": 0, "duplicates": 0, "invalid": 0, "failed": 0}
    seen: set[str] = set()
    while sum(counts.values()) < max_messages:
        messages = sqs.receive_message(
            QueueUrl=target.audit_dlq_url, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=60
        ).get("Messages", [])
        fresh = [m for m in messages if m["MessageId"] not in seen]
        if not fresh:
            break
        for message in fresh:
            seen.add(message["MessageId"])
            try:
                row = json.loads(message["Body"], parse_float=Decimal)
                if not isinstance(row, dict) or not row.get(n.INVOCATIONS.pk):
                    raise ValueError("no invocation_id")
            except ValueError:
                counts["invalid"] += 1  # left in the queue for a human: never dropped
                continue
            try:
                ddb.put_item(
                    TableName=target.table(n.INVOCATIONS),
                    Item=_serialize(row),
                    ConditionExpression="attribute_not_exists(#id)",
                    ExpressionAttributeNames={"#id": n.INVOCATIONS.pk},
                )
                counts["replayed"] += 1
            except ClientError as exc:
                if _code(exc) != "ConditionalCheckFailedException":
                    counts["failed"] += 1
                    continue
                counts["duplicates"] += 1
            sqs.delete_message(QueueUrl=target.audit_dlq_url, ReceiptHandle=message["ReceiptHandle"])
    if target.audit_spool:
        # Local stack: rows spooled while its emulated AWS was down, through the same writer.
        writer = AuditWriter(
            table_name=target.table(n.INVOCATIONS), dlq_url=target.audit_dlq_url, ddb=ddb, sqs=sqs
        )
        for key, value in drain_spool(target.audit_spool, writer).items():
            counts[key] += value
    return counts


# --- findings --------------------------------------------------------------------------------
def findings_list(target: Target, *, since: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """Backstop findings at or after `since` (default: the last 24 h), newest first. The table
    is partitioned by UTC day and sorted by `<ISO timestamp>#<event id>#<n>`, so `since` is a
    key condition on its own day and whole partitions after it."""
    now = utc_now()
    start = parse_time(since) if since else now - timedelta(hours=24)
    days = (now.date() - start.astimezone(UTC).date()).days
    if days > limits.FINDINGS_RETENTION_DAYS:
        raise CtlError(
            f"--since is more than {limits.FINDINGS_RETENTION_DAYS} days ago (findings expire after that)"
        )
    partitions = []
    for offset in range(max(days, 0) + 1):  # newest partition first
        day = (now - timedelta(days=offset)).strftime("%Y-%m-%d")
        kwargs: dict[str, Any] = {
            "TableName": target.table(n.FINDINGS),
            "KeyConditionExpression": "#pk = :d",
            "ExpressionAttributeNames": {"#pk": n.FINDINGS.pk},
            "ExpressionAttributeValues": {":d": {"S": day}},
            "ScanIndexForward": False,
        }
        if offset == days:  # the oldest partition: only from `since` on
            kwargs["KeyConditionExpression"] += " AND #sk >= :s"
            kwargs["ExpressionAttributeNames"]["#sk"] = n.FINDINGS.sort_key
            kwargs["ExpressionAttributeValues"][":s"] = {"S": iso_z_ms(start)}
        partitions.append(_items(target, "query", **kwargs))
    return list(islice(chain.from_iterable(partitions), limit))


# --- files (SPEC §14.3) ---------------------------------------------------------------
def _artifacts_bucket(target: Target) -> str:
    if not target.artifacts_bucket:
        raise CtlError(f"stage {target.stage} has no artifacts bucket (output {n.OUTPUT_ARTIFACTS_BUCKET})")
    return target.artifacts_bucket


def files_list(target: Target, tenant_id: str, turn_id: str | None = None) -> list[dict[str, Any]]:
    """A tenant's artifacts, newest first (optionally one turn's)."""
    from sandbox_common.files import list_pointers

    pointers = list_pointers(target.client("s3"), _artifacts_bucket(target), tenant_id, turn_id)
    keep = (
        "file_id",
        "filename",
        "bytes",
        "content_type",
        "sha256",
        "created_at",
        "turn_id",
        "invocation_id",
    )
    return [{k: p.get(k) for k in keep} for p in pointers]


def files_get(target: Target, tenant_id: str, file_id: str, path: str) -> dict[str, Any]:
    """Write one artifact's bytes to `path`, only if they hash to its recorded sha256."""
    from sandbox_common.files import read_pointer

    bucket = _artifacts_bucket(target)
    s3 = target.client("s3")
    pointer = read_pointer(s3, bucket, tenant_id, file_id)
    if pointer is None:
        raise CtlError(f"no file {file_id} for tenant {tenant_id}")
    data = s3.get_object(Bucket=bucket, Key=pointer["key"])["Body"].read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != pointer["sha256"]:
        raise CtlError(
            f"file {file_id}: sha256 {digest} does not match the recorded {pointer['sha256']}; nothing"
            " written"
        )
    partial = f"{path}.partial"
    with open(partial, "wb") as fh:
        fh.write(data)
    os.replace(partial, path)
    return {
        "file_id": file_id,
        "filename": pointer["filename"],
        "bytes": len(data),
        "sha256": digest,
        "path": path,
    }
