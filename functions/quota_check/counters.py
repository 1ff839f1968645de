"""DynamoDB data access for the circuit-breaker counters, one per calls dimension
(`sandbox_common.dimensions.calls()`). Owns boto3.

One `TransactWriteItems` increments every window or none; each Update carries the guard
`attribute_not_exists(#c) OR #c < :cap`, so a refused call changes nothing, and the transaction
is never retried on a ConditionalCheckFailed (that *is* the answer). Every other failure
becomes `CounterStoreError`, which the caller turns into a fail-closed refusal.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from sandbox_common import aws, dimensions, limits, naming
from sandbox_common.settings import quota_settings
from sandbox_common.windows import Windows

from .caps import Caps

_CONDITION_FAILED = "ConditionalCheckFailed"


class CounterStoreError(Exception):
    """The store could not give a certain answer (throttled after retries, conflict, missing
    table, access denied, endpoint down...). `code` is the AWS error/cancellation code."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class CapReached(Exception):
    """The transaction was cancelled because a window is at its cap.

    `dimension` is the first failed item's, in dimension order (tenant_daily when several failed).
    `counts` holds the current count of each item that failed (from ALL_OLD).
    """

    def __init__(self, dimension: str, counts: dict[str, int | None]) -> None:
        super().__init__(dimension)
        self.dimension = dimension
        self.counts = counts


@dataclass(frozen=True)
class CounterItem:
    dimension: str
    table: str
    pk: str  # the table's key attribute
    ttl_attribute: str
    key: str
    window: str
    expires_at: int  # epoch seconds: window end + grace
    attributes: tuple[tuple[str, str], ...]  # descriptive attributes written with each update
    marker_attribute: str  # on the call's "counted" marker: this item's key


@dataclass(frozen=True)
class CounterKeys:
    """The counter items of one call, in dimension (refusal priority) order."""

    items: tuple[CounterItem, ...]

    @classmethod
    def for_call(cls, tenant_id: str, agent_id: str, windows: Windows) -> CounterKeys:
        settings = quota_settings()
        grace = timedelta(seconds=limits.COUNTER_EXPIRY_GRACE_SECONDS)
        values = {naming.COUNTER_ATTR_TENANT: tenant_id, naming.COUNTER_ATTR_AGENT: agent_id}
        items = []
        for dimension in dimensions.calls():
            assert dimension.table is not None and dimension.marker_attribute is not None  # calls'
            items.append(
                CounterItem(
                    dimension=dimension.name,
                    table=settings.counters_table(dimension.table),
                    pk=dimension.table.pk,
                    ttl_attribute=dimension.table.ttl,
                    key=dimension.counter_key(values, windows),
                    window=dimension.window_label(windows),
                    expires_at=int((dimension.resets_at(windows) + grace).timestamp()),
                    attributes=tuple((field, values[field]) for field in dimension.key),
                    marker_attribute=dimension.marker_attribute,
                )
            )
        return cls(tuple(items))

    def __getitem__(self, dimension: str) -> CounterItem:
        return next(item for item in self.items if item.dimension == dimension)

    def in_order(self) -> tuple[CounterItem, ...]:
        """Transaction order = dimension order (cancellation reasons come back in this order, and
        the first dimension at its cap is the one reported)."""
        return self.items


def _update(item: CounterItem, cap: int) -> dict[str, Any]:
    # Values travel only as expression attribute values and names, never inside an expression
    # string, so nothing from a request can alter the expression.
    names = {"#c": naming.COUNTER_ATTR_COUNT, "#e": item.ttl_attribute, "#w": naming.COUNTER_ATTR_WINDOW}
    values: dict[str, Any] = {
        ":zero": {"N": "0"},
        ":one": {"N": "1"},
        ":cap": {"N": str(cap)},
        ":exp": {"N": str(item.expires_at)},
        ":w": {"S": item.window},
    }
    sets = ["#c = if_not_exists(#c, :zero) + :one", "#e = :exp", "#w = :w"]
    for index, (attr, value) in enumerate(item.attributes):
        names[f"#a{index}"] = attr
        values[f":a{index}"] = {"S": value}
        sets.append(f"#a{index} = :a{index}")
    return {
        "Update": {
            "TableName": item.table,
            "Key": {item.pk: {"S": item.key}},
            "UpdateExpression": "SET " + ", ".join(sets),
            "ConditionExpression": "attribute_not_exists(#c) OR #c < :cap",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }


# DynamoDB cancels a TransactWriteItems that conflicts with a concurrent one on the same item
# (a hot tenant_daily counter under load) and the SDK does not retry it. Nothing was written, so
# retrying is safe; a few jittered attempts keep concurrent legitimate calls from failing closed.
CONFLICT_ATTEMPTS = 4
_CONFLICT = "TransactionConflict"


@dataclass(frozen=True)
class TurnGuard:
    """The ConditionCheck on the caller's turn : the count happens only if the
    turn exists, belongs to this agent, is not ended and is bound to this token hash ("" = a
    token-less turn, also one whose item has no hash attribute) — turn_token.verify's rules."""

    table: str
    tenant_id: str
    agent_id: str
    turn_id: str
    token_sha256: str


@dataclass(frozen=True)
class Marker:
    """The "counted" marker of one call_id, Put in the same transaction: a second count of the
    same call (retry, racing duplicate) is cancelled on it. Lives in the tenant-daily table."""

    table: str
    key: str
    expires_at: int


class TurnRefused(Exception):
    """The turn guard failed: nothing counted. `exists` False = no such turn item."""

    def __init__(self, exists: bool) -> None:
        super().__init__("turn_refused")
        self.exists = exists


class AlreadyCounted(Exception):
    """This call_id's marker exists (and has not expired): it was counted before."""


@dataclass(frozen=True)
class PolicyCheck:
    """The ConditionCheck on the tenant's policy item (the operator's switch), read strongly
    consistent inside the count's transaction: a tenant disabled (`sandbox_enabled` false, or a
    tier that is not standard) is refused from the moment its policy is written, whichever
    container's cache says what — no flip back. No item: the tenant's defaults (dispatch's
    pre-flight reads those)."""

    table: str
    tenant_id: str


@dataclass(frozen=True)
class BreakerCheck:
    """The ConditionCheck on the tenant's breaker version: the caps this container admits on
    must be read no earlier than the caps another container refused the tenant on
    (docs/circuit-breakers.md)."""

    table: str
    tenant_id: str
    caps_read_ms: int

    @property
    def key(self) -> str:
        return breaker_key(self.tenant_id)


class TenantDisabled(Exception):
    """The tenant's policy item says it is disabled: nothing counted."""


class BreakerStale(Exception):
    """This container's caps are older than the caps a refusal of the tenant was decided on:
    nothing counted; read them again, then decide."""


def breaker_key(tenant_id: str) -> str:
    return f"{naming.QUOTA_BREAKER_PREFIX}{tenant_id}"


def _policy_check(policy: PolicyCheck) -> dict[str, Any]:
    return {
        "ConditionCheck": {
            "TableName": policy.table,
            "Key": naming.TENANTS.key(policy.tenant_id, naming.TENANT_POLICY_ITEM),
            "ConditionExpression": "attribute_not_exists(#pk) OR ((attribute_not_exists(#on) OR #on = :true)"
            " AND (attribute_not_exists(#tier) OR #tier = :standard))",
            "ExpressionAttributeNames": {
                "#pk": naming.TENANTS.pk,
                "#on": naming.POLICY_ATTR_ENABLED,
                "#tier": naming.POLICY_ATTR_TIER,
            },
            "ExpressionAttributeValues": {":true": {"BOOL": True}, ":standard": {"S": naming.TIER_STANDARD}},
        }
    }


def _breaker_check(breaker: BreakerCheck) -> dict[str, Any]:
    return {
        "ConditionCheck": {
            "TableName": breaker.table,
            "Key": naming.TENANT_DAILY_COUNTERS.key(breaker.key),
            "ConditionExpression": "attribute_not_exists(#seen) OR #seen <= :read",
            "ExpressionAttributeNames": {"#seen": naming.QUOTA_BREAKER_ATTR_SEEN},
            "ExpressionAttributeValues": {":read": {"N": str(breaker.caps_read_ms)}},
        }
    }


def publish_breaker(table: str, tenant_id: str, caps_read_ms: int, *, ttl_seconds: int) -> bool:
    """Raise the tenant's breaker version to `caps_read_ms` (never lower it): a refusal was
    decided on caps read then. False when it already was as high; raises CounterStoreError."""
    try:
        aws.client("dynamodb").update_item(
            TableName=table,
            Key=naming.TENANT_DAILY_COUNTERS.key(breaker_key(tenant_id)),
            UpdateExpression="SET #seen = :read, #exp = :exp",
            ConditionExpression="attribute_not_exists(#seen) OR #seen < :read",
            ExpressionAttributeNames={
                "#seen": naming.QUOTA_BREAKER_ATTR_SEEN,
                "#exp": naming.TENANT_DAILY_COUNTERS.ttl,
            },
            ExpressionAttributeValues={
                ":read": {"N": str(caps_read_ms)},
                ":exp": {"N": str(int(time.time()) + ttl_seconds)},
            },
        )
        return True
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            return False
        raise CounterStoreError(str(exc.response.get("Error", {}).get("Code") or "ClientError")) from exc
    except BotoCoreError as exc:
        raise CounterStoreError(type(exc).__name__) from exc


def marker_key(tenant_id: str, call_id: str) -> str:
    return f"{naming.QUOTA_MARKER_PREFIX}{tenant_id}#{call_id}"


def _condition_check(guard: TurnGuard) -> dict[str, Any]:
    names = {
        "#t": naming.TURNS.sort_key,
        "#a": naming.TURN_ATTR_AGENT,
        "#e": naming.TURN_ATTR_ENDED,
        "#h": naming.TURN_ATTR_TOKEN_HASH,
    }
    values: dict[str, Any] = {
        ":agent": {"S": guard.agent_id},
        ":false": {"BOOL": False},
        ":hash": {"S": guard.token_sha256},
    }
    token = "#h = :hash" if guard.token_sha256 else "(attribute_not_exists(#h) OR #h = :hash)"
    return {
        "ConditionCheck": {
            "TableName": guard.table,
            "Key": naming.TURNS.key(guard.tenant_id, guard.turn_id),
            "ConditionExpression": f"attribute_exists(#t) AND #a = :agent AND "
            f"(attribute_not_exists(#e) OR #e = :false) AND {token}",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            # ALL_OLD tells a missing turn (no Item) from a refused one (dispatch falls back only
            # for the first; the token hash comes back to this Lambda only, never further).
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }


def _marker_put(marker: Marker, keys: CounterKeys, now: int) -> dict[str, Any]:
    return {
        "Put": {
            "TableName": marker.table,
            "Item": {
                naming.TENANT_DAILY_COUNTERS.pk: {"S": marker.key},
                naming.TENANT_DAILY_COUNTERS.ttl: {"N": str(marker.expires_at)},
                **{item.marker_attribute: {"S": item.key} for item in keys.in_order()},
            },
            # An expired marker (TTL deletion is lazy) is as good as none.
            "ConditionExpression": "attribute_not_exists(#pk) OR #exp < :now",
            "ExpressionAttributeNames": {
                "#pk": naming.TENANT_DAILY_COUNTERS.pk,
                "#exp": naming.TENANT_DAILY_COUNTERS.ttl,
            },
            "ExpressionAttributeValues": {":now": {"N": str(now)}},
        }
    }


def increment_all(
    keys: CounterKeys,
    caps: Caps,
    *,
    sleep: Any = time.sleep,
    guard: TurnGuard | None = None,
    marker: Marker | None = None,
    policy: PolicyCheck | None = None,
    breaker: BreakerCheck | None = None,
    now: int | None = None,
) -> int:
    """Add one to every window atomically; answers how many transaction conflicts were retried
    (visible retries: the agent is shown them). Raises TurnRefused > AlreadyCounted >
    TenantDisabled > BreakerStale > CapReached (that precedence when several conditions fail at
    once), or CounterStoreError. Transaction order: [turn check], [marker], [policy check],
    [breaker check], then the counters in dimension order — CancellationReasons come back in the
    same order."""
    items = keys.in_order()
    head: list[dict[str, Any]] = []
    kinds: list[type[Exception]] = []  # what a failed condition of each head item means
    if guard is not None:
        head.append(_condition_check(guard))
        kinds.append(TurnRefused)
    if marker is not None:
        head.append(_marker_put(marker, keys, int(time.time()) if now is None else now))
        kinds.append(AlreadyCounted)
    if policy is not None:
        head.append(_policy_check(policy))
        kinds.append(TenantDisabled)
    if breaker is not None:
        head.append(_breaker_check(breaker))
        kinds.append(BreakerStale)
    for attempt in range(CONFLICT_ATTEMPTS):
        try:
            aws.client("dynamodb").transact_write_items(
                TransactItems=head + [_update(item, caps.for_dimension(item.dimension)) for item in items]
            )
            return attempt
        except ClientError as exc:
            error = exc.response.get("Error", {})
            if error.get("Code") != "TransactionCanceledException":
                raise CounterStoreError(str(error.get("Code") or "ClientError")) from exc
            reasons = exc.response.get("CancellationReasons") or []
            if _only_conflicts(reasons) and attempt + 1 < CONFLICT_ATTEMPTS:
                sleep(random.uniform(0, 0.025 * 2**attempt))
                continue
            if len(reasons) == len(head) + len(items):
                for kind, reason in zip(kinds, reasons, strict=False):  # in precedence order
                    if reason.get("Code") != _CONDITION_FAILED:
                        continue
                    if kind is TurnRefused:
                        raise TurnRefused(exists=bool(reason.get("Item"))) from exc
                    raise kind() from exc
                reasons = reasons[len(head) :]
            raise _classify_cancellation(items, reasons) from exc
        except BotoCoreError as exc:  # endpoint down, read timeout, ...
            raise CounterStoreError(type(exc).__name__) from exc
    raise CounterStoreError(_CONFLICT)  # unreachable: the last attempt raises above


def release(marker_table: str, marker: str) -> bool:
    """Undo the count of one call_id: delete its marker and take one off each counter item the
    marker names, in one transaction (each -1 guarded by count > 0). False when there is no marker
    (nothing counted under it). Raises CounterStoreError."""
    settings = quota_settings()
    ddb = aws.client("dynamodb")
    try:
        got = ddb.get_item(
            TableName=marker_table, Key=naming.TENANT_DAILY_COUNTERS.key(marker), ConsistentRead=True
        ).get("Item")
        if not got:
            return False

        def minus_one(dimension: dimensions.Dimension, key: str) -> dict[str, Any]:
            assert dimension.table is not None  # a calls dimension's
            return {
                "Update": {
                    "TableName": settings.counters_table(dimension.table),
                    "Key": dimension.table.key(key),
                    "UpdateExpression": "SET #c = #c - :one",
                    "ConditionExpression": "#c > :zero",
                    "ExpressionAttributeNames": {"#c": naming.COUNTER_ATTR_COUNT},
                    "ExpressionAttributeValues": {":one": {"N": "1"}, ":zero": {"N": "0"}},
                }
            }

        ddb.transact_write_items(
            TransactItems=[
                {
                    "Delete": {
                        "TableName": marker_table,
                        "Key": naming.TENANT_DAILY_COUNTERS.key(marker),
                        "ConditionExpression": "attribute_exists(#pk)",
                        "ExpressionAttributeNames": {"#pk": naming.TENANT_DAILY_COUNTERS.pk},
                    }
                },
                # each counter this call's count went to (a dimension the marker does not name was
                # not counted under it)
                *(
                    minus_one(dimension, got[str(dimension.marker_attribute)]["S"])
                    for dimension in dimensions.calls()
                    if str(dimension.marker_attribute) in got
                ),
            ]
        )
        return True
    except ClientError as exc:
        raise CounterStoreError(str(exc.response.get("Error", {}).get("Code") or "ClientError")) from exc
    except BotoCoreError as exc:
        raise CounterStoreError(type(exc).__name__) from exc


def _only_conflicts(reasons: list[dict[str, Any]]) -> bool:
    codes = [reason.get("Code") or "None" for reason in reasons]
    return _CONFLICT in codes and all(code in ("None", _CONFLICT) for code in codes)


def _classify_cancellation(items: tuple[CounterItem, ...], reasons: list[dict[str, Any]]) -> Exception:
    """Which window refused. Per the DynamoDB API, reasons are ordered like TransactItems and an
    item with no error has a null code. Anything but ConditionalCheckFailed (TransactionConflict,
    ThrottlingError, ValidationError, ...) or a malformed list is a store error: fail closed."""
    if len(reasons) != len(items):
        return CounterStoreError("TransactionCanceledWithoutReasons")
    codes = [reason.get("Code") or "None" for reason in reasons]
    other = [code for code in codes if code not in ("None", _CONDITION_FAILED)]
    if other or _CONDITION_FAILED not in codes:
        return CounterStoreError(other[0] if other else "TransactionCanceled")
    counts: dict[str, int | None] = {item.dimension: None for item in items}
    for item, reason in zip(items, reasons, strict=True):
        if reason.get("Code") == _CONDITION_FAILED:
            old = (reason.get("Item") or {}).get(naming.COUNTER_ATTR_COUNT, {}).get("N")
            counts[item.dimension] = int(old) if old is not None else None
    failed = [item.dimension for item, code in zip(items, codes, strict=True) if code == _CONDITION_FAILED]
    return CapReached(failed[0], counts)  # items are in priority order: tenant_daily first


def read_counts(keys: CounterKeys) -> dict[str, int | None]:
    """Every count, read back with ONE strongly consistent BatchGetItem.

    TransactWriteItems returns no attribute values (only ConsumedCapacity and
    ItemCollectionMetrics), so this read is the only way to report counts. They are the counts
    *at read time*: never below this call's own increment, possibly above it when concurrent
    calls committed in between. A count that cannot be read (error, unprocessed key) is None:
    the admission already committed and stands; the counts are informational only.
    """
    items = keys.in_order()
    request: dict[str, Any] = {}
    for item in items:
        table = request.setdefault(item.table, {"Keys": [], "ConsistentRead": True})
        table["Keys"].append({item.pk: {"S": item.key}})
        table["ProjectionExpression"] = "#k, #c"
        table["ExpressionAttributeNames"] = {"#k": item.pk, "#c": naming.COUNTER_ATTR_COUNT}
    counts: dict[str, int | None] = {item.dimension: None for item in items}
    try:
        response = aws.client("dynamodb").batch_get_item(RequestItems=request)
    except (ClientError, BotoCoreError):
        return counts
    for item in items:
        for row in response.get("Responses", {}).get(item.table, []):
            if row.get(item.pk, {}).get("S") == item.key and naming.COUNTER_ATTR_COUNT in row:
                counts[item.dimension] = int(row[naming.COUNTER_ATTR_COUNT]["N"])
    return counts
