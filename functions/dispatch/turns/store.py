"""Turn state (docs/sessions.md): who owns a turn, and the one session all its calls share.

Item in the TURNS table, keyed by (tenant_id, turn_id): turn ids are per tenant, so one tenant's
turn never blocks, nor is visible to, another tenant using the same id (naming.TURNS):
  agent_id, created_at, expires_at (TTL)
  session_state: starting | active | stopped   session_id, interpreter_id, session_started_at
  slot_id                                       — the session's slot in the session ledger,
                                                  released when the session stops
  lease_owner, lease_expires_at (epoch s)       — who is starting the session right now
  turn_token_sha256 (naming.TURN_ATTR_TOKEN_HASH) — SHA-256 of the turn token, written by
                                                  the create; "" (or absent) = a token-less turn
  warm_hint | warm_pool_empty                   — begin_turn's note about the turn's warm pool
                                                  (begin_turn's hint): a session to claim, or "empty"

The store only stores: every write is one conditional request (so a stale container can never
overwrite a newer session) and answers with a bool or a `Turn`. Who may use a turn and the
session-lease protocol built from these writes live in `dispatch.turns.flow` and `dispatch.sessions.lease`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError
from sandbox_common import ddb_item, limits
from sandbox_common import naming as n
from sandbox_common.table_store import TableStore

_TURN_TTL_SECONDS = 2 * 86_400


class TurnStoreUnavailable(Exception):
    pass


class TurnUnclaimed(Exception):
    """The turn claim sent ahead failed on the turns table (not a refusal of the caller)."""

    def __init__(self, cause: TurnStoreUnavailable) -> None:
        super().__init__(str(cause))
        self.cause = cause


@dataclass(frozen=True)
class Turn:
    turn_id: str
    tenant_id: str
    agent_id: str
    session_state: str | None = None
    session_id: str | None = None
    interpreter_id: str | None = None
    session_started_at: int | None = None
    lease_owner: str | None = None
    lease_expires_at: int | None = None
    ended: bool = False  # end_turn closed it: no new session may start
    token_hash: str = ""  # the bound turn token's SHA-256; "" = token-less (also items from before tokens)
    slot_id: str | None = None  # the live session's ledger slot (freed when the session stops)
    # a warm session of the turn's pool begin_turn picked (not claimed): slot_id, session_id,
    # interpreter_id, environment, started_at — all strings. The first call claims it in one write.
    warm_hint: dict[str, str] | None = None
    # begin_turn found the pool empty — environment, interpreter_id, checked_at (strings).
    # The first call then reserves a cold slot without reading the pool again.
    pool_empty: dict[str, str] | None = None
    # the turn has its live session (a fact of the item, read wherever the turn goes)
    live_session: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "live_session", self.session_state == n.TURN_SESSION_ACTIVE and bool(self.session_id)
        )

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Turn:
        s, i = ddb_item.readers(item)

        return cls(
            turn_id=item["turn_id"]["S"],
            tenant_id=item["tenant_id"]["S"],
            agent_id=item["agent_id"]["S"],
            session_state=s(n.TURN_ATTR_SESSION_STATE),
            session_id=s(n.TURN_ATTR_SESSION_ID),
            interpreter_id=s("interpreter_id"),
            session_started_at=i("session_started_at"),
            lease_owner=s("lease_owner"),
            lease_expires_at=i("lease_expires_at"),
            ended=item.get(n.TURN_ATTR_ENDED, {}).get("BOOL", False),
            token_hash=s(n.TURN_ATTR_TOKEN_HASH) or "",
            slot_id=s(n.TURN_ATTR_SLOT_ID),
            warm_hint=_hint(item.get(n.TURN_ATTR_WARM_HINT)),
            pool_empty=_strings(item.get(n.TURN_ATTR_POOL_EMPTY), _POOL_EMPTY_FIELDS),
        )

    def session_underway(self, now: float) -> bool:
        """The turn has its session, or a caller holds an unexpired lease starting it."""
        if self.ended:
            return False
        return self.live_session or (
            self.session_state == n.TURN_SESSION_STARTING and (self.lease_expires_at or 0) > now
        )

    def pool_known_empty(self, environment: str, interpreter_id: str, now: float) -> bool:
        """begin_turn found this environment's pool (for this interpreter) empty, at most
        WARM_POOL_EMPTY_MARK_SECONDS ago: the first call need not read it again."""
        mark = self.pool_empty
        if mark is None or mark["environment"] != environment or mark["interpreter_id"] != interpreter_id:
            return False
        try:
            return 0 <= now - int(mark["checked_at"]) <= limits.WARM_POOL_EMPTY_MARK_SECONDS
        except ValueError:
            return False


_HINT_FIELDS = ("slot_id", "session_id", "interpreter_id", "environment", "started_at")
_POOL_EMPTY_FIELDS = ("environment", "interpreter_id", "checked_at")


def _hint(value: dict[str, Any] | None) -> dict[str, str] | None:
    # absent, or not a hint this code wrote: ignored (the first call queries the pool)
    return _strings(value, _HINT_FIELDS)


def _strings(value: dict[str, Any] | None, names: tuple[str, ...]) -> dict[str, str] | None:
    fields = (value or {}).get("M") or {}
    if not all(isinstance(fields.get(f), dict) and "S" in fields[f] for f in names):
        return None
    return {f: fields[f]["S"] for f in names}


def _key(tenant_id: str, turn_id: str) -> dict[str, Any]:
    return n.TURNS.key(tenant_id, turn_id)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class TurnStore(TableStore):
    # --- ownership ----------------------------------------------------------------------------
    def get(self, tenant_id: str, turn_id: str) -> Turn | None:
        try:
            out = self.ddb.get_item(TableName=self.table, Key=_key(tenant_id, turn_id), ConsistentRead=True)
        except Exception as exc:  # noqa: BLE001
            raise TurnStoreUnavailable(type(exc).__name__) from None
        return Turn.from_item(out["Item"]) if "Item" in out else None

    def create(self, tenant_id: str, agent_id: str, turn_id: str, token_hash: str = "") -> Turn | None:
        """Create the turn for (tenant, agent), bound to `token_hash` ("" = token-less) in the
        same conditional write; None if it exists already (someone else's or ours)."""
        now = int(self.clock())
        try:
            self.ddb.put_item(
                TableName=self.table,
                Item={
                    "turn_id": {"S": turn_id},
                    "tenant_id": {"S": tenant_id},
                    "agent_id": {"S": agent_id},
                    "created_at": {"N": str(now)},
                    n.TTL_ATTRIBUTE: {"N": str(now + _TURN_TTL_SECONDS)},
                    n.TURN_ATTR_TOKEN_HASH: {"S": token_hash},
                },
                ConditionExpression="attribute_not_exists(turn_id)",
            )
            return Turn(turn_id=turn_id, tenant_id=tenant_id, agent_id=agent_id, token_hash=token_hash)
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise TurnStoreUnavailable(_code(exc)) from None
        except Exception as exc:  # noqa: BLE001
            raise TurnStoreUnavailable(type(exc).__name__) from None
        return None

    # --- the turn's one session (the protocol: dispatch.sessions.lease) ------------------------
    def take_lease(self, turn: Turn, owner: str, lease_seconds: int) -> bool:
        now = int(self.clock())
        condition, values = self._seen_state(turn, now)
        values.update(
            {
                ":starting": {"S": n.TURN_SESSION_STARTING},
                ":owner": {"S": owner},
                ":exp": {"N": str(now + lease_seconds)},
            }
        )
        return self._update(
            turn.tenant_id,
            turn.turn_id,
            "SET #st = :starting, lease_owner = :owner, lease_expires_at = :exp",
            condition,
            values,
        )

    def bind(
        self, turn: Turn, session_id: str, interpreter_id: str, *, slot_id: str, started_at: int | None
    ) -> bool:
        """A session that needs no start (a claimed warm one) becomes the turn's in ONE
        conditional write, on the state we saw (as `take_lease`); False if another caller holds
        or won the turn's session meanwhile (then the lease protocol decides)."""
        update = self.bind_item(turn, session_id, interpreter_id, slot_id=slot_id, started_at=started_at)[
            "Update"
        ]
        return self._update(
            turn.tenant_id,
            turn.turn_id,
            update["UpdateExpression"],
            update["ConditionExpression"],
            update["ExpressionAttributeValues"],
        )

    def bind_item(
        self, turn: Turn, session_id: str, interpreter_id: str, *, slot_id: str, started_at: int | None
    ) -> dict[str, Any]:
        """`bind` as a TransactWriteItems element, for the warm claim that binds in the same write
        (SessionLedger.claim_warm_bound). The hint is consumed with it."""
        now = int(self.clock())
        condition, values = self._seen_state(turn, now)
        values.update(
            {
                ":active": {"S": n.TURN_SESSION_ACTIVE},
                ":sid": {"S": session_id},
                ":iid": {"S": interpreter_id},
                ":at": {"N": str(now if started_at is None else int(started_at))},
                ":slot": {"S": slot_id},
            }
        )
        update = (
            f"SET #st = :active, session_id = :sid, interpreter_id = :iid, session_started_at = :at, "
            f"{n.TURN_ATTR_SLOT_ID} = :slot REMOVE lease_owner, lease_expires_at, {n.TURN_ATTR_WARM_HINT}"
        )
        return {
            "Update": {
                "TableName": self.table,
                "Key": _key(turn.tenant_id, turn.turn_id),
                "UpdateExpression": update,
                "ConditionExpression": condition,
                "ExpressionAttributeNames": {"#st": n.TURN_ATTR_SESSION_STATE},
                "ExpressionAttributeValues": values,
            }
        }

    def set_hint(self, turn: Turn, hint: dict[str, str]) -> bool:
        """Remember a warm session for the turn's first call (begin_turn): a hint, never a
        claim — the session stays in its pool until a first call's conditional write takes it.
        Only on a turn still open without a live session; False otherwise."""
        if set(hint) != set(_HINT_FIELDS):
            raise ValueError(f"a warm hint has exactly the fields {_HINT_FIELDS}")
        return self._note(turn, n.TURN_ATTR_WARM_HINT, hint, n.TURN_ATTR_POOL_EMPTY)

    def set_pool_empty(self, turn: Turn, *, environment: str, interpreter_id: str) -> bool:
        """begin_turn found the turn's pool empty: the first call reserves a cold slot
        without reading the pool again (`Turn.pool_known_empty`). Like `set_hint`, only on a turn
        still open without a live session; False otherwise."""
        checked_at = str(int(self.clock()))
        mark = {"environment": environment, "interpreter_id": interpreter_id, "checked_at": checked_at}
        return self._note(turn, n.TURN_ATTR_POOL_EMPTY, mark, n.TURN_ATTR_WARM_HINT)

    def _note(self, turn: Turn, attribute: str, fields: dict[str, str], replaces: str) -> bool:
        """begin_turn's one note about the pool (a hint or "empty"), replacing the other kind."""
        return self._update(
            turn.tenant_id,
            turn.turn_id,
            f"SET {attribute} = :note REMOVE {replaces}",
            "attribute_exists(turn_id) AND attribute_not_exists(ended) AND "
            "(attribute_not_exists(#st) OR #st <> :active)",
            {
                ":note": {"M": {k: {"S": str(v)} for k, v in fields.items()}},
                ":active": {"S": n.TURN_SESSION_ACTIVE},
            },
        )

    @staticmethod
    def _seen_state(turn: Turn, now: int) -> tuple[str, dict[str, Any]]:
        """The condition "the turn's session is still as we saw it": a live session we judged
        unusable (stale/too old/other interpreter), a stopped one, none, or a lease that expired."""
        if turn.session_state == n.TURN_SESSION_ACTIVE and turn.session_id:
            return (
                "#st = :active AND session_id = :seen AND attribute_not_exists(ended)",
                {":active": {"S": n.TURN_SESSION_ACTIVE}, ":seen": {"S": turn.session_id}},
            )
        return (
            "attribute_not_exists(ended) AND (attribute_not_exists(#st) OR #st = :stopped OR "
            "(#st = :starting AND lease_expires_at < :now))",
            {
                ":stopped": {"S": n.TURN_SESSION_STOPPED},
                ":starting": {"S": n.TURN_SESSION_STARTING},
                ":now": {"N": str(now)},
            },
        )

    def activate(
        self,
        tenant_id: str,
        turn_id: str,
        owner: str,
        session_id: str,
        interpreter_id: str,
        *,
        slot_id: str | None = None,
        started_at: int | None = None,
    ) -> None:
        """The lease winner's session becomes the turn's. `slot_id`: its session-ledger slot;
        `started_at`: when the session really started (a warm one started before this turn)."""
        values: dict[str, Any] = {
            ":active": {"S": n.TURN_SESSION_ACTIVE},
            ":sid": {"S": session_id},
            ":iid": {"S": interpreter_id},
            ":now": {"N": str(int(self.clock()) if started_at is None else int(started_at))},
            ":owner": {"S": owner},
        }
        update = "SET #st = :active, session_id = :sid, interpreter_id = :iid, session_started_at = :now"
        if slot_id:
            update += f", {n.TURN_ATTR_SLOT_ID} = :slot"
            values[":slot"] = {"S": slot_id}
        update += " REMOVE lease_owner, lease_expires_at" + ("" if slot_id else f", {n.TURN_ATTR_SLOT_ID}")
        # end_turn won the race: stop it
        activated = self._update(
            tenant_id, turn_id, update, "lease_owner = :owner AND attribute_not_exists(ended)", values
        )
        if not activated:  # our lease was taken over (it expired): the session is not the turn's
            raise TurnStoreUnavailable("session lease lost before activation")

    def release_lease(self, tenant_id: str, turn_id: str, owner: str) -> None:
        try:
            self._update(
                tenant_id,
                turn_id,
                "SET #st = :stopped REMOVE lease_owner, lease_expires_at",
                "lease_owner = :owner",
                {":stopped": {"S": n.TURN_SESSION_STOPPED}, ":owner": {"S": owner}},
            )
        except TurnStoreUnavailable:  # the lease expires on its own
            pass

    def end(self, tenant_id: str, turn_id: str) -> None:
        """Close the turn: no session may start for it afterwards (idempotent)."""
        self._update(
            tenant_id, turn_id, "SET ended = :true", "attribute_exists(turn_id)", {":true": {"BOOL": True}}
        )

    def mark_stopped(self, tenant_id: str, turn_id: str, session_id: str) -> bool:
        """Record that `session_id` is gone; False if the turn already moved on to another session."""
        return self._update(
            tenant_id,
            turn_id,
            "SET #st = :stopped",
            "#st = :active AND session_id = :sid",
            {
                ":stopped": {"S": n.TURN_SESSION_STOPPED},
                ":active": {"S": n.TURN_SESSION_ACTIVE},
                ":sid": {"S": session_id},
            },
        )

    def _update(
        self, tenant_id: str, turn_id: str, update: str, condition: str, values: dict[str, Any]
    ) -> bool:
        """One conditional write to the turn: True if applied, False if its condition did not hold."""
        try:
            # DynamoDB rejects an alias the expressions do not use
            names = {"#st": n.TURN_ATTR_SESSION_STATE} if "#st" in update + condition else None
            self.ddb.update_item(
                TableName=self.table,
                Key=_key(tenant_id, turn_id),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
                **({"ExpressionAttributeNames": names} if names else {}),
            )
            return True
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise TurnStoreUnavailable(_code(exc)) from None
        except Exception as exc:  # noqa: BLE001 — endpoint errors, timeouts
            raise TurnStoreUnavailable(type(exc).__name__) from None
