"""The live-session ledger. Data access: owns boto3, returns models.

Why it lives in the shared layer and not in `sandbox-quota-check`: three parties write it —
dispatch (reserve before Start, release on stop), the reaper (release what it stops) and the
warm-pool refill — and none of those writes is on the call-counting path. Routing them through
the quota Lambda would add one synchronous invoke to every session start and stop and make the
reaper depend on that Lambda; the call counters stay the quota Lambda's alone.

Layout (one table, naming.SESSIONS): one *slot* item per session (reserved BEFORE Start, so a
lost Start answer still holds its capacity until released), one counter item per tenant and one
for the stage. A reservation is ONE TransactWriteItems: put the slot + `live_count + 1` on both
counters, each guarded by `attribute_not_exists(live_count) OR live_count < :cap`; a release is
ONE TransactWriteItems: delete the slot (it must exist) + `live_count - 1` on both. So the counts
equal the number of slots at every commit, N concurrent reservations against cap C admit exactly
C, and a slot is freed exactly once whoever (dispatch, reaper, operator) releases it.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from .. import ddb_item, dimensions, limits
from .. import naming as n
from ..table_store import TableStore

_CONDITION_FAILED = "ConditionalCheckFailed"
_CONFLICT = "TransactionConflict"
CONFLICT_ATTEMPTS = 4  # transaction conflicts on the hot `global` counter: retried, then fail closed
# A slot whose session never became active (Start hung, the Lambda died) is released by the
# reaper once this has passed.
_SLOT_TTL_SECONDS = 2 * 86_400


class LedgerUnavailable(Exception):
    """The ledger gave no certain answer: callers fail closed."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class SessionCapReached(Exception):
    """A reservation would exceed `dimension` (a sessions dimension)."""

    def __init__(self, dimension: str, *, kill_switch: bool = False) -> None:
        super().__init__(dimension)
        self.dimension = dimension
        self.kill_switch = kill_switch


class SessionCaps(dimensions.Caps):
    """A tenant's session caps, one per sessions dimension (`dimensions.sessions()`): each counts
    the live sessions of its scope, the tenant's (keyed by tenant_id) or the stage's."""

    KIND = dimensions.Kind.SESSIONS


@dataclass(frozen=True)
class Reservation:
    slot_id: str
    retries: int  # transaction conflicts retried (reported as quota_transaction_conflict)


@dataclass(frozen=True)
class Slot:
    slot_id: str
    tenant_id: str
    environment: str
    state: str  # starting | warm | active
    source: str  # warm | cold
    started_at: int
    lease_expires_at: int | None = None
    session_id: str | None = None
    interpreter_id: str | None = None
    turn_id: str | None = None
    agent_id: str | None = None
    recycle_at: int | None = None
    claimed_at: int | None = None

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Slot:
        s, i = ddb_item.readers(item)

        return cls(
            slot_id=item[n.SESSIONS.pk]["S"][len(n.SESSION_SLOT_PREFIX) :],
            tenant_id=s("tenant_id") or "",
            environment=s("environment") or "",
            state=s("state") or "",
            source=s("source") or "",
            started_at=i("started_at") or 0,
            lease_expires_at=i("lease_expires_at"),
            session_id=s("session_id"),
            interpreter_id=s("interpreter_id"),
            turn_id=s("turn_id"),
            agent_id=s("agent_id"),
            recycle_at=i("recycle_at"),
            claimed_at=i("claimed_at"),
        )


def _slot_key(slot_id: str) -> dict[str, Any]:
    return n.SESSIONS.key(n.SESSION_SLOT_PREFIX + slot_id)


def _tenant_key(tenant_id: str) -> dict[str, Any]:
    return n.SESSIONS.key(n.SESSION_TENANT_COUNTER_PREFIX + tenant_id)


_GLOBAL_KEY = n.SESSIONS.key(n.SESSION_GLOBAL_COUNTER_KEY)


def pool_key(tenant_id: str, environment: str) -> str:
    return f"{tenant_id}#{environment}"


def claim_min_life_seconds(call_timeout_seconds: int) -> int:
    """A warm session is handed to a turn only with at least a call's life (+ margin) left."""
    return call_timeout_seconds + limits.WARM_RECYCLE_MARGIN_SECONDS


class SessionLedger(TableStore):
    # --- capacity -----------------------------------------------------------------------------
    def reserve(
        self,
        *,
        tenant_id: str,
        environment: str,
        source: str,
        caps: SessionCaps,
        lease_seconds: int,
        turn_id: str | None = None,
        agent_id: str | None = None,
    ) -> Reservation:
        """Hold one session's capacity (state `starting`) before Start is called.

        Raises SessionCapReached (tenant first when both are full; a 0 cap before any write, so
        the kill switch creates nothing) or LedgerUnavailable (fail closed).
        """
        if source not in n.SESSION_SOURCES:
            raise ValueError(f"unknown session source {source!r}")
        scoped = dimensions.sessions()
        for dimension in scoped:  # in dimension order: the tenant's cap first
            if caps.for_dimension(dimension.name) == 0:
                raise SessionCapReached(dimension.name, kill_switch=True)
        slot_id = str(uuid.uuid4())
        now = int(self.clock())
        slot: dict[str, Any] = {
            **_slot_key(slot_id),
            "tenant_id": {"S": tenant_id},
            "environment": {"S": environment},
            "state": {"S": "starting"},
            "source": {"S": source},
            "started_at": {"N": str(now)},
            "lease_expires_at": {"N": str(now + lease_seconds)},
            n.SESSIONS.ttl: {"N": str(now + _SLOT_TTL_SECONDS)},
        }
        if turn_id:
            slot["turn_id"] = {"S": turn_id}
        if agent_id:
            slot["agent_id"] = {"S": agent_id}
        items = [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": slot,
                    "ConditionExpression": f"attribute_not_exists({n.SESSIONS.pk})",
                }
            },
            *(
                self._increment(_tenant_key(tenant_id), caps.for_dimension(d.name), tenant_id)
                if d.per_tenant
                else self._increment(_GLOBAL_KEY, caps.for_dimension(d.name), None)
                for d in scoped
            ),
        ]
        retries = self._transact(items, on_condition=_cap_dimension)
        return Reservation(slot_id=slot_id, retries=retries)

    def _increment(self, key: dict[str, Any], cap: int, tenant_id: str | None) -> dict[str, Any]:
        names = {"#c": n.SESSION_ATTR_LIVE_COUNT}
        values: dict[str, Any] = {":zero": {"N": "0"}, ":one": {"N": "1"}, ":cap": {"N": str(cap)}}
        update = "SET #c = if_not_exists(#c, :zero) + :one"
        if tenant_id is not None:
            names["#t"] = "tenant_id"
            values[":t"] = {"S": tenant_id}
            update += ", #t = :t"
        return {
            "Update": {
                "TableName": self.table,
                "Key": key,
                "UpdateExpression": update,
                "ConditionExpression": "attribute_not_exists(#c) OR #c < :cap",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    def release(self, slot_id: str) -> bool:
        """Free a slot and its capacity. True if this call freed it, False if it was already
        gone (freed exactly once, whoever races). Raises LedgerUnavailable."""
        slot = self.get(slot_id)
        if slot is None:
            return False
        decrement = {"#c": n.SESSION_ATTR_LIVE_COUNT}
        values = {":one": {"N": "1"}, ":zero": {"N": "0"}}
        items: list[dict[str, Any]] = [
            {
                "Delete": {
                    "TableName": self.table,
                    "Key": _slot_key(slot_id),
                    "ConditionExpression": f"attribute_exists({n.SESSIONS.pk})",
                }
            },
            *(
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": key,
                        "UpdateExpression": "SET #c = #c - :one",
                        "ConditionExpression": "#c > :zero",
                        "ExpressionAttributeNames": decrement,
                        "ExpressionAttributeValues": values,
                    }
                }
                for key in (_tenant_key(slot.tenant_id), _GLOBAL_KEY)
            ),
        ]
        try:
            self._transact(items, on_condition=_release_condition)
        except _AlreadyGone:
            return False
        return True

    def _transact(
        self, items: list[dict[str, Any]], *, on_condition: Callable[[list[str]], str | None]
    ) -> int:
        """Run one transaction; returns how many conflicts were retried."""
        for attempt in range(CONFLICT_ATTEMPTS):
            try:
                self.ddb.transact_write_items(TransactItems=items)
                return attempt
            except ClientError as exc:
                error = exc.response.get("Error", {})
                if error.get("Code") != "TransactionCanceledException":
                    raise LedgerUnavailable(str(error.get("Code") or "ClientError")) from None
                codes = [r.get("Code") or "None" for r in exc.response.get("CancellationReasons") or []]
                if len(codes) != len(items):
                    raise LedgerUnavailable("TransactionCanceledWithoutReasons") from None
                if _CONFLICT in codes and all(c in ("None", _CONFLICT) for c in codes):
                    if attempt + 1 < CONFLICT_ATTEMPTS:
                        self.sleep(random.uniform(0, 0.025 * 2**attempt))
                        continue
                    raise LedgerUnavailable(_CONFLICT) from None
                other = [c for c in codes if c not in ("None", _CONDITION_FAILED)]
                if other:
                    raise LedgerUnavailable(other[0]) from None
                dimension = on_condition(codes)
                if dimension is None:
                    raise _AlreadyGone() from None
                raise SessionCapReached(dimension) from None
            except BotoCoreError as exc:
                raise LedgerUnavailable(type(exc).__name__) from None
        raise LedgerUnavailable(_CONFLICT)  # pragma: no cover — the loop always returns or raises

    # --- slot lifecycle -----------------------------------------------------------------------
    def activate(self, slot_id: str, *, session_id: str, interpreter_id: str) -> bool:
        """A cold start succeeded: the slot now holds this live session (serving its turn)."""
        return self._update(
            slot_id,
            "SET #st = :active, session_id = :sid, interpreter_id = :iid REMOVE lease_expires_at",
            "#st = :starting",
            {
                ":active": {"S": "active"},
                ":starting": {"S": "starting"},
                ":sid": {"S": session_id},
                ":iid": {"S": interpreter_id},
            },
        )

    def make_warm(self, slot_id: str, *, session_id: str, interpreter_id: str, recycle_at: int) -> bool:
        """A refill start passed its readiness preamble: offer it in the tenant × environment pool."""
        slot = self.get(slot_id)
        if slot is None:
            return False
        return self._update(
            slot_id,
            "SET #st = :warm, session_id = :sid, interpreter_id = :iid, recycle_at = :rec, #pool = :pool "
            "REMOVE lease_expires_at",
            "#st = :starting",
            {
                ":warm": {"S": "warm"},
                ":starting": {"S": "starting"},
                ":sid": {"S": session_id},
                ":iid": {"S": interpreter_id},
                ":rec": {"N": str(recycle_at)},
                ":pool": {"S": pool_key(slot.tenant_id, slot.environment)},
            },
            names={"#pool": n.SESSION_ATTR_WARM_POOL},
        )

    def warm_candidates(
        self,
        *,
        tenant_id: str,
        environment: str,
        min_life_seconds: int,
        interpreter_id: str | None = None,
        limit: int = limits.WARM_HINT_CANDIDATES,
    ) -> list[Slot]:
        """The pool's sessions a turn could claim now (one Query of the sparse by_warm_pool index,
        eventually consistent: every claim re-checks them in its condition). Raises LedgerUnavailable."""
        now = int(self.clock())
        try:
            listed = self.ddb.query(
                TableName=self.table,
                IndexName=n.SESSIONS_BY_WARM_POOL.name,
                KeyConditionExpression="#pool = :pool",
                ExpressionAttributeNames={"#pool": n.SESSION_ATTR_WARM_POOL},
                ExpressionAttributeValues={":pool": {"S": pool_key(tenant_id, environment)}},
                Limit=limit,
            )
        except (ClientError, BotoCoreError) as exc:
            raise LedgerUnavailable(type(exc).__name__) from None
        found = []
        for item in listed.get("Items", []):
            candidate = Slot.from_item(item)
            if candidate.recycle_at is not None and candidate.recycle_at - now < min_life_seconds:
                continue  # about to be recycled: the reaper's, not a turn's
            if interpreter_id is not None and candidate.interpreter_id != interpreter_id:
                continue  # started on an interpreter the tenant no longer publishes: recycled
            found.append(candidate)
        return found

    def claim_warm(
        self,
        *,
        tenant_id: str,
        environment: str,
        turn_id: str,
        agent_id: str,
        min_life_seconds: int,
        interpreter_id: str | None = None,
    ) -> Slot | None:
        """Hand one warm session of the pool to a turn: ONE conditional write per candidate.

        The condition (still warm, still in this pool, not about to be recycled) makes two
        concurrent claims of the same slot impossible: exactly one write applies. None when the
        pool is empty. Raises LedgerUnavailable.
        """
        pool = pool_key(tenant_id, environment)
        now = int(self.clock())
        for candidate in self.warm_candidates(
            tenant_id=tenant_id,
            environment=environment,
            min_life_seconds=min_life_seconds,
            interpreter_id=interpreter_id,
        ):
            try:
                out = self.ddb.update_item(
                    TableName=self.table,
                    Key=_slot_key(candidate.slot_id),
                    ReturnValues="ALL_NEW",
                    **_claim_expressions(pool, turn_id, agent_id, now, min_life_seconds),
                )
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                    continue  # another turn claimed it first (or the reaper took it): next one
                raise LedgerUnavailable(str(exc.response.get("Error", {}).get("Code"))) from None
            except BotoCoreError as exc:
                raise LedgerUnavailable(type(exc).__name__) from None
            return Slot.from_item(out["Attributes"])
        return None

    def claim_warm_bound(
        self, hint: Slot, *, turn_id: str, agent_id: str, min_life_seconds: int, bind: dict[str, Any]
    ) -> bool:
        """Claim the warm session `hint` (picked by begin_turn) AND bind the turn to it in
        ONE TransactWriteItems: [the slot, conditioned like `claim_warm` plus "still this session";
        `bind`, the turn's own conditional Update (TurnStore.bind_item)]. Both apply or neither:
        a session is never claimed without its turn pointing at it, nor bound without its claim.

        False when either condition failed (the hint is stale: another turn claimed it, it was
        recycled; or the turn's session moved on): the caller falls back to the pool query.
        Raises LedgerUnavailable (conflicts retried, then fail closed)."""
        pool = pool_key(hint.tenant_id, hint.environment)
        claim = _claim_expressions(pool, turn_id, agent_id, int(self.clock()), min_life_seconds)
        claim["ConditionExpression"] += " AND session_id = :sid AND interpreter_id = :iid"
        claim["ExpressionAttributeValues"].update(
            {":sid": {"S": str(hint.session_id)}, ":iid": {"S": str(hint.interpreter_id)}}
        )
        items = [{"Update": {"TableName": self.table, "Key": _slot_key(hint.slot_id), **claim}}, bind]
        try:
            self._transact(items, on_condition=lambda _codes: None)
        except _AlreadyGone:
            return False
        return True

    def unclaim(self, slot_id: str, *, turn_id: str) -> bool:
        """Give a claimed warm session back to its pool (the claiming call was refused before
        using it). Only the turn that claimed it can, and only a warm-sourced slot."""
        slot = self.get(slot_id)
        if slot is None or slot.source != "warm":
            return False
        return self._update(
            slot_id,
            "SET #st = :warm, #pool = :pool REMOVE turn_id, agent_id, claimed_at",
            "#st = :active AND turn_id = :turn",
            {
                ":warm": {"S": "warm"},
                ":active": {"S": "active"},
                ":turn": {"S": turn_id},
                ":pool": {"S": pool_key(slot.tenant_id, slot.environment)},
            },
            names={"#pool": n.SESSION_ATTR_WARM_POOL},
        )

    # --- reads --------------------------------------------------------------------------------
    def get(self, slot_id: str) -> Slot | None:
        try:
            out = self.ddb.get_item(TableName=self.table, Key=_slot_key(slot_id), ConsistentRead=True)
        except (ClientError, BotoCoreError) as exc:
            raise LedgerUnavailable(type(exc).__name__) from None
        return Slot.from_item(out["Item"]) if "Item" in out else None

    def slots(self) -> list[Slot]:
        """Every slot of the stage (at most global_sessions items: a scan is cheap)."""
        found: list[Slot] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "ConsistentRead": True,
            "FilterExpression": "begins_with(#k, :slot)",
            "ExpressionAttributeNames": {"#k": n.SESSIONS.pk},
            "ExpressionAttributeValues": {":slot": {"S": n.SESSION_SLOT_PREFIX}},
        }
        try:
            while True:
                out = self.ddb.scan(**kwargs)
                found.extend(Slot.from_item(item) for item in out.get("Items", []))
                if "LastEvaluatedKey" not in out:
                    return found
                kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]
        except (ClientError, BotoCoreError) as exc:
            raise LedgerUnavailable(type(exc).__name__) from None

    def holds_for_turn(self, tenant_id: str, turn_id: str) -> bool:
        """A slot of this turn holds capacity for a session still to be started (`starting`, its
        lease unexpired: a crashed holder's lapses). One consistent scan (at most global_sessions
        items)."""
        now = int(self.clock())
        return any(
            slot.tenant_id == tenant_id
            and slot.turn_id == turn_id
            and slot.state == "starting"
            and (slot.lease_expires_at or 0) > now
            for slot in self.slots()
        )

    def find_session(self, session_id: str) -> Slot | None:
        return next((s for s in self.slots() if s.session_id == session_id), None)

    def live_counts(self, tenant_id: str) -> tuple[int, int]:
        """(tenant live_count, stage live_count) as the counters hold them."""
        try:
            out = self.ddb.batch_get_item(
                RequestItems={
                    self.table: {"Keys": [_tenant_key(tenant_id), _GLOBAL_KEY], "ConsistentRead": True}
                }
            )
        except (ClientError, BotoCoreError) as exc:
            raise LedgerUnavailable(type(exc).__name__) from None
        counts = {
            row[n.SESSIONS.pk]["S"]: int(row.get(n.SESSION_ATTR_LIVE_COUNT, {"N": "0"})["N"])
            for row in out.get("Responses", {}).get(self.table, [])
        }
        return (
            counts.get(n.SESSION_TENANT_COUNTER_PREFIX + tenant_id, 0),
            counts.get(n.SESSION_GLOBAL_COUNTER_KEY, 0),
        )

    def _update(
        self,
        slot_id: str,
        update: str,
        condition: str,
        values: dict[str, Any],
        *,
        names: dict[str, str] | None = None,
    ) -> bool:
        try:
            self.ddb.update_item(
                TableName=self.table,
                Key=_slot_key(slot_id),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
                ExpressionAttributeNames={"#st": "state", **(names or {})},
            )
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return False
            raise LedgerUnavailable(str(exc.response.get("Error", {}).get("Code"))) from None
        except BotoCoreError as exc:
            raise LedgerUnavailable(type(exc).__name__) from None


class _AlreadyGone(Exception):
    pass


def _claim_expressions(
    pool: str, turn_id: str, agent_id: str, now: int, min_life_seconds: int
) -> dict[str, Any]:
    """The warm claim of one slot: still warm, still in this pool, not about to be recycled."""
    return {
        "UpdateExpression": (
            "SET #st = :active, turn_id = :turn, agent_id = :agent, claimed_at = :now REMOVE #pool"
        ),
        "ConditionExpression": "#st = :warm AND #pool = :pool AND recycle_at > :min",
        "ExpressionAttributeNames": {"#st": "state", "#pool": n.SESSION_ATTR_WARM_POOL},
        "ExpressionAttributeValues": {
            ":active": {"S": "active"},
            ":warm": {"S": "warm"},
            ":pool": {"S": pool},
            ":turn": {"S": turn_id},
            ":agent": {"S": agent_id},
            ":now": {"N": str(now)},
            ":min": {"N": str(now + min_life_seconds)},
        },
    }


def _cap_dimension(codes: list[str]) -> str | None:
    """Reasons are ordered like the items: [slot, then one counter per sessions dimension]. The
    slot's own condition (a fresh uuid) never fails in practice; if it did, it is a store error."""
    if codes[0] == _CONDITION_FAILED:
        raise LedgerUnavailable("slot_exists")
    scoped = dimensions.sessions()
    failed = [d.name for d, code in zip(scoped, codes[1:], strict=False) if code == _CONDITION_FAILED]
    return failed[0] if failed else scoped[-1].name


def _release_condition(codes: list[str]) -> str | None:
    """[slot delete, tenant counter, global counter]: a failed delete means someone else freed
    it; a counter already at 0 with the slot present is an inconsistency: never hide it."""
    if codes[0] == _CONDITION_FAILED:
        return None
    raise LedgerUnavailable("counter_underflow")
