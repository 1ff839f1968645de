"""`sandboxctl warm …` and `sandboxctl sessions …`: operations over a
`Target` returning plain data. The ledger is read and written through the same
`sandbox_common.sessions.ledger` dispatch and the reaper use.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from sandbox_common import limits
from sandbox_common import naming as n
from sandbox_common.sessions.ledger import SessionLedger, Slot
from sandbox_common.windows import iso_z

from infra.sandboxctl.errors import CtlError
from infra.sandboxctl.items import parameter_value
from infra.sandboxctl.ops import require_known_tenant, substrate
from infra.sandboxctl.target import Target

SESSION_COLUMNS = (
    "session_id",
    "tenant",
    "agent",
    "turn",
    "environment",
    "state",
    "source",
    "started_at",
    "calls",
    "last_call_at",
)


def ledger(target: Target) -> SessionLedger:
    return SessionLedger(table_name=target.table(n.SESSIONS), ddb=target.client("dynamodb"))


# --- warm pool -------------------------------------------------------------------------------
def warm_set(target: Target, tenant_id: str, size: int, environment: str) -> dict[str, Any]:
    if size < 0:
        raise CtlError(f"refused: {size} is negative; warm_sessions is a non-negative integer")
    require_known_tenant(target, tenant_id)
    published = substrate(target, tenant_id)
    if published is not None and published.environments and environment not in published.environments:
        raise CtlError(
            f"tenant {tenant_id} has no {environment} environment "
            f"(it has: {', '.join(published.environments)})"
        )
    name = n.warm_sessions_parameter(target.stage, tenant_id, environment)
    ssm = target.client("ssm")
    previous = parameter_value(ssm, name)
    ssm.put_parameter(Name=name, Value=str(size), Type="String", Overwrite=True)
    return {
        "parameter": name,
        "value": size,
        "previous": previous,
        "refill": refill_now(target, tenant_id, environment),
    }


_SCHEDULED = f"the reaper's next scheduled run (every {limits.REAPER_SCHEDULE_MINUTES} minutes) refills it"


def refill_now(target: Target, tenant_id: str, environment: str) -> str:
    """Ask the stage's reaper to refill (or trim) this one pool now, off the CLI's path (an
    asynchronous invoke with its `refill` event) instead of at its next scheduled run: "started",
    or why not (the schedule still refills it within REAPER_SCHEDULE_MINUTES)."""
    if not target.reaper_function:
        return f"not started (no reaper known); {_SCHEDULED}"
    payload = {n.REFILL_EVENT_KEY: {"tenant_id": tenant_id, "environment": environment}}
    try:
        target.client("lambda").invoke(
            FunctionName=target.reaper_function, InvocationType="Event", Payload=json.dumps(payload).encode()
        )
    except (ClientError, BotoCoreError) as exc:
        code = (
            exc.response.get("Error", {}).get("Code") if isinstance(exc, ClientError) else type(exc).__name__
        )
        return f"not started ({code}); {_SCHEDULED}"
    return "started"


def _desired(target: Target) -> dict[tuple[str, str], int | str]:
    prefix = n.tenant_parameters_prefix(target.stage)
    sizes: dict[tuple[str, str], int | str] = {}
    for page in (
        target.client("ssm").get_paginator("get_parameters_by_path").paginate(Path=prefix, Recursive=True)
    ):
        for parameter in page.get("Parameters", []):
            tenant, _, rest = parameter["Name"][len(prefix) :].partition("/")
            kind, _, environment = rest.partition("/")
            if kind == "warm" and environment in n.ENVIRONMENTS:
                raw = parameter.get("Value", "")
                sizes[(tenant, environment)] = int(raw) if raw.isascii() and raw.isdigit() else raw
    return sizes


def warm_rows(target: Target, tenant_id: str | None = None) -> list[dict[str, Any]]:
    desired = _desired(target)
    held: dict[tuple[str, str], dict[str, int]] = {}
    for slot in ledger(target).slots():
        if slot.source == "warm" and slot.state in ("warm", "starting"):
            counts = held.setdefault((slot.tenant_id, slot.environment), {"warm": 0, "starting": 0})
            counts[slot.state] += 1
    rows = []
    for key in sorted(set(desired) | set(held)):
        if tenant_id is not None and key[0] != tenant_id:
            continue
        counts = held.get(key, {"warm": 0, "starting": 0})
        rows.append(
            {
                "tenant": key[0],
                "environment": key[1],
                "warm_sessions": desired.get(key, 0),
                "warm": counts["warm"],
                "starting": counts["starting"],
            }
        )
    return rows


# --- sessions --------------------------------------------------------------------------------
def _iso(epoch: int | None) -> str | None:
    return None if epoch is None else iso_z(datetime.fromtimestamp(epoch, tz=UTC))


def _calls(target: Target, session_id: str | None) -> tuple[int, str | None]:
    """Calls of a session and the last one's start, from the audit trail's by_session index."""
    if not session_id:
        return 0, None
    ddb = target.client("dynamodb")
    request: dict[str, Any] = {
        "TableName": target.table(n.INVOCATIONS),
        "IndexName": n.INVOCATIONS_BY_SESSION.name,
        "KeyConditionExpression": "#s = :s",
        "ExpressionAttributeNames": {
            "#s": n.INVOCATIONS_BY_SESSION.pk,
            "#t": str(n.INVOCATIONS_BY_SESSION.sk),
        },
        "ExpressionAttributeValues": {":s": {"S": session_id}},
        "ProjectionExpression": "#t",
    }
    count, last = 0, None
    for page in ddb.get_paginator("query").paginate(**request):
        for item in page.get("Items", []):
            count += 1
            started = item.get("started_at", {}).get("S")
            if started and (last is None or started > last):
                last = started
    return count, last


def session_row(target: Target, slot: Slot) -> dict[str, Any]:
    calls, last = _calls(target, slot.session_id)
    return {
        "session_id": slot.session_id,
        "tenant": slot.tenant_id,
        "agent": slot.agent_id,
        "turn": slot.turn_id,
        "environment": slot.environment,
        "state": slot.state,
        "source": slot.source,
        "started_at": _iso(slot.started_at),
        "calls": calls,
        "last_call_at": last,
        "slot_id": slot.slot_id,
    }


def sessions_list(
    target: Target, *, tenant_id: str | None = None, include_all: bool = False
) -> list[dict[str, Any]]:
    """Sessions serving turns; `include_all` adds the unclaimed warm pool and starts in flight."""
    slots = [s for s in ledger(target).slots() if tenant_id is None or s.tenant_id == tenant_id]
    if not include_all:
        slots = [s for s in slots if s.state == "active"]
    return [session_row(target, s) for s in sorted(slots, key=lambda s: (s.tenant_id, s.started_at))]


def sessions_stop(target: Target, session_id: str) -> dict[str, Any]:
    """Stop one session (with the operator's credentials) and free its capacity."""
    book = ledger(target)
    slot = book.find_session(session_id)
    if slot is None:
        raise CtlError(f"no live session {session_id} in the ledger (see `sandboxctl sessions list --all`)")
    if slot.interpreter_id:
        try:
            target.client("bedrock-agentcore").stop_code_interpreter_session(
                codeInterpreterIdentifier=slot.interpreter_id, sessionId=session_id
            )
        except ClientError as exc:
            if (
                exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException"
            ):  # already gone is fine
                raise CtlError(
                    f"stop failed ({exc.response.get('Error', {}).get('Code')}); "
                    "the session keeps its slot until it stops"
                ) from None
    freed = book.release(slot.slot_id)
    return {"session_id": session_id, "tenant": slot.tenant_id, "stopped": True, "freed": freed}
