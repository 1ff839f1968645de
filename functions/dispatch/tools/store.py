"""Continuations of paused tool-calling calls: single-use, bound to tenant, agent and turn.

One item per pause in the CONTINUATIONS table, keyed by the SHA-256 of a random token that only
the agent ever sees (dispatch stores the hash, never the token):
  tenant_id, agent_id, turn_id, status (paused | claimed | expired), paused_at (ISO), expires_at
  (TTL, epoch s), call (JSON: the execute_code's audit context), state (binary, zlib JSON of the
  runner's ToolCallState without output), stdout_head / stderr_head (binary, zlib).

`claim()` is ONE conditional UpdateItem (status paused -> claimed, and tenant, agent and turn
must match): a reused, stale, unknown or foreign token fails the same condition and gets the same
SandboxInvalidRequest, with nothing run. Two concurrent resumes of one token: exactly one wins.
Tool inputs and results are never stored here: the state holds their hashes only.
A store failure fails closed (SandboxError, nothing run).

A claimed continuation stays in the sweep's `by_wait_due` index, due at the resume's own deadline
(`until`: the moment the Lambda runtime kills it). The resume that ends the call or pauses it again
`settle`s it (or replaces it with the next pause, in one transaction), which takes it out of the
index. A resume whose dispatch died leaves it claimed and due: the reaper's sweep (`expire_due`)
or a retry of the same resume past that deadline takes it (`Continuation.interrupted`, one
conditional write: claimed and due -> expired) and ends the call as `dispatch_interrupted` with
its one row. A retry before the deadline is answered StillRunning; a retry of a settled one gets
the call's stored final answer (`Answered`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import secrets
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from sandbox_common import aws, messages
from sandbox_common import naming as n
from sandbox_common.errors import SandboxError, SandboxInvalidRequest, StillRunning
from sandbox_runtime.runner.tool_calling import ToolCallState
from sandbox_runtime.stored_answer import stored_form, unpack

from dispatch.parts import Parts

TOKEN_BYTES = 32
TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")  # 32 random bytes, URL-safe base64 without padding
STATUS_PAUSED = "paused"
STATUS_CLAIMED = "claimed"
STATUS_EXPIRED = "expired"
STATUS_SETTLED = "settled"  # the call ended (its row written) or paused again under a new token
_ATTR_CLAIM_REF = "claim_ref"  # who holds the claim: a settle must be its holder's
_ATTR_ANSWER = "answer"  # the call's final answer (stored form), for a retried resume
# A retried resume's `retry_after_s` (call_in_progress): the time to the claim's deadline, at most this.
RETRY_AFTER_MAX_SECONDS = 10
# A paused item outlives the wait bound by a day, so a late resume still finds it and can end
# the call as a timeout (with its audit row) instead of answering "unknown".
GRACE_SECONDS = 86_400

INVALID_CONTINUATION = messages.CONTINUATION_INVALID
STORE_UNAVAILABLE = messages.CONTINUATION_STORE_UNAVAILABLE


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Continuation:
    """A claimed continuation: who it belongs to, the call's audit context and the runner state.
    `interrupted`: taken from a resume whose dispatch died (its claim's deadline passed)."""

    tenant_id: str
    agent_id: str
    turn_id: str
    call: dict[str, Any]
    state: ToolCallState
    key: str = ""
    claim_ref: str = ""
    interrupted: bool = False


class Answered(Exception):  # noqa: N818 — an answer, not an error
    """A resume of a continuation whose call already ended: `response` is its stored final answer."""

    def __init__(self, response: dict[str, Any]) -> None:
        super().__init__("answered")
        self.response = response


class ContinuationStore:
    def __init__(
        self, table_name: str, *, client: Any = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.table_name = table_name
        self._client = client
        self._clock = clock

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = aws.client("dynamodb")
        return self._client

    def issue(
        self,
        *,
        tenant_id: str,
        agent_id: str,
        turn_id: str,
        call: dict[str, Any],
        state: ToolCallState,
        wait_seconds: float,
        replaces: Continuation | None = None,
    ) -> str:
        """Store a pause; returns the token the agent must send back (only here, only once).
        `replaces`: the claimed continuation this pause follows, settled in the same transaction
        (both land or neither; SandboxError when its claim is no longer this resume's)."""
        token = secrets.token_urlsafe(TOKEN_BYTES)
        now = self._clock()
        data = state.to_dict()
        stdout_head, stderr_head = data.pop("stdout_head"), data.pop("stderr_head")
        item = {
            n.CONTINUATIONS.pk: {"S": token_hash(token)},
            "tenant_id": {"S": tenant_id},
            "agent_id": {"S": agent_id},
            "turn_id": {"S": turn_id},
            "status": {"S": STATUS_PAUSED},
            n.CONTINUATION_ATTR_PAUSED_AT: {
                "S": datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            },
            n.CONTINUATIONS.ttl: {"N": str(int(now + wait_seconds + GRACE_SECONDS))},
            # the sweep's sparse index: listed while paused, from the wait bound on
            n.CONTINUATION_ATTR_WAIT_OPEN: {"S": n.CONTINUATION_WAIT_OPEN_VALUE},
            n.CONTINUATION_ATTR_WAIT_DUE: {"S": _due_key(now + wait_seconds)},
            "call": {"S": json.dumps(call, separators=(",", ":"), sort_keys=True)},
            "state": {"B": zlib.compress(json.dumps(data, separators=(",", ":")).encode("utf-8"))},
            "stdout_head": {"B": zlib.compress(stdout_head)},
            "stderr_head": {"B": zlib.compress(stderr_head)},
        }
        put = {
            "TableName": self.table_name,
            "Item": item,
            "ConditionExpression": "attribute_not_exists(#pk)",
            "ExpressionAttributeNames": {"#pk": n.CONTINUATIONS.pk},
        }
        try:
            if replaces is None:
                self.client.put_item(**put)
            else:
                self.client.transact_write_items(
                    TransactItems=[{"Put": put}, {"Update": _settled(self, replaces)}]
                )
        except (ClientError, BotoCoreError) as exc:
            raise SandboxError(STORE_UNAVAILABLE, failure_reason=f"continuation_store:{_code(exc)}") from None
        return token

    def claim(self, token: Any, *, tenant_id: str, agent_id: str, turn_id: str, until: float) -> Continuation:
        """Consume a continuation for a resume whose dispatch dies at `until` (epoch s). A
        continuation of exactly this tenant, agent and turn that is not paused: StillRunning (its
        resume is under way), Answered (its call ended), or — its resume died, past `until` — the
        Continuation to end as interrupted. Anything else -> SandboxInvalidRequest (one answer for
        every case)."""
        if not isinstance(token, str) or not TOKEN_RE.match(token):
            raise SandboxInvalidRequest(INVALID_CONTINUATION)
        key = token_hash(token)
        owner = {"tenant_id": tenant_id, "agent_id": agent_id, "turn_id": turn_id}
        try:
            return self._transition(
                key, STATUS_CLAIMED, due_at=until, tenant_id=tenant_id, agent_id=agent_id, turn_id=turn_id
            )
        except _Taken as taken:
            old = taken.item
        if old is None or any(old.get(k, {}).get("S") != v for k, v in owner.items()):
            raise SandboxInvalidRequest(INVALID_CONTINUATION)
        status = old.get("status", {}).get("S")
        if status == STATUS_SETTLED and _ATTR_ANSWER in old:
            raise Answered(unpack(json.loads(zlib.decompress(bytes(old[_ATTR_ANSWER]["B"])))))
        if status != STATUS_CLAIMED or n.CONTINUATION_ATTR_WAIT_DUE not in old:
            raise SandboxInvalidRequest(INVALID_CONTINUATION)
        due = int(old[n.CONTINUATION_ATTR_WAIT_DUE]["S"]) / 1000
        if due > self._clock():
            raise StillRunning(int(min(RETRY_AFTER_MAX_SECONDS, max(1, math.ceil(due - self._clock())))))
        try:
            return self._transition(
                key,
                STATUS_EXPIRED,
                held=STATUS_CLAIMED,
                tenant_id=tenant_id,
                agent_id=agent_id,
                turn_id=turn_id,
            )
        except _Taken:  # another finisher (the sweep, a racing retry) took it first: ask again shortly
            raise StillRunning(1) from None

    def settle(self, claimed: Continuation, response: dict[str, Any] | None) -> bool:
        """The call of a claimed continuation ended with `response` (its row written): out of the
        sweep's index, the answer kept for a retried resume. False when another finisher holds it
        now (a resume past its deadline, taken as interrupted). Never raises: a settle that failed
        leaves the claim due, and its finisher's row is a no-op (same invocation id)."""
        update = _settled(self, claimed)
        if response is not None:
            packed = json.dumps(stored_form(response), separators=(",", ":")).encode("utf-8")
            update["UpdateExpression"] = update["UpdateExpression"].replace(
                "SET #s = :settled", "SET #s = :settled, #answer = :answer"
            )
            update["ExpressionAttributeNames"]["#answer"] = _ATTR_ANSWER
            update["ExpressionAttributeValues"][":answer"] = {"B": zlib.compress(packed)}
        try:
            self.client.update_item(**update)
        except (ClientError, BotoCoreError):
            return False
        return True

    def expire_for_turn(self, *, tenant_id: str, turn_id: str) -> list[Continuation]:
        """Claim (as expired) every paused continuation of a turn — for end_turn or a reaper, so
        the calls they belong to end with their audit row (ToolsRunner.expire)."""
        try:
            pages = self._scan_turn(tenant_id, turn_id)
        except (ClientError, BotoCoreError) as exc:
            raise SandboxError(STORE_UNAVAILABLE, failure_reason=f"continuation_store:{_code(exc)}") from None
        claimed = []
        for key, agent_id in pages:
            try:
                claimed.append(
                    self._transition(
                        key, STATUS_EXPIRED, tenant_id=tenant_id, agent_id=agent_id, turn_id=turn_id
                    )
                )
            except _Taken:  # resumed concurrently: that resume owns it now
                continue
        return claimed

    def expire_due(self, *, now: float | None = None, limit: int = 100) -> list[Continuation]:
        """Claim (as expired) up to `limit` paused continuations, of any turn, whose tool wait bound
        has passed — the reaper's paused-calls sweep. Each claim is the same conditional
        UpdateItem a resume takes, so a late resume, an end_turn or a second sweep racing this one
        end the call once. Raises SandboxError when the store cannot be read."""
        due = _due_key(self._clock() if now is None else now)
        try:
            answer = self.client.query(
                TableName=self.table_name,
                IndexName=n.CONTINUATIONS_BY_WAIT_DUE.name,
                Limit=limit,
                KeyConditionExpression="#open = :open AND #due <= :due",
                ExpressionAttributeNames={
                    "#open": n.CONTINUATION_ATTR_WAIT_OPEN,
                    "#due": n.CONTINUATION_ATTR_WAIT_DUE,
                },
                ExpressionAttributeValues={
                    ":open": {"S": n.CONTINUATION_WAIT_OPEN_VALUE},
                    ":due": {"S": due},
                },
            )
        except (ClientError, BotoCoreError) as exc:
            raise SandboxError(STORE_UNAVAILABLE, failure_reason=f"continuation_store:{_code(exc)}") from None
        claimed = []
        for item in answer.get("Items", []):
            held = item.get("status", {}).get("S")  # paused (wait bound passed) or claimed (its resume died)
            try:
                claimed.append(
                    self._transition(
                        item[n.CONTINUATIONS.pk]["S"],
                        STATUS_EXPIRED,
                        held=STATUS_CLAIMED if held == STATUS_CLAIMED else STATUS_PAUSED,
                        tenant_id=item["tenant_id"]["S"],
                        agent_id=item["agent_id"]["S"],
                        turn_id=item["turn_id"]["S"],
                    )
                )
            except _Taken:  # resumed, settled or ended meanwhile: that caller owns it now
                continue
        return claimed

    # --- internals ----------------------------------------------------------------------------
    def _scan_turn(self, tenant_id: str, turn_id: str) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        index = n.CONTINUATIONS.indexes[0]
        for page in self.client.get_paginator("query").paginate(
            TableName=self.table_name,
            IndexName=index.name,
            KeyConditionExpression="turn_id = :turn",
            FilterExpression="tenant_id = :t AND #s = :paused",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={
                ":turn": {"S": turn_id},
                ":t": {"S": tenant_id},
                ":paused": {"S": STATUS_PAUSED},
            },
        ):
            found.extend((i[n.CONTINUATIONS.pk]["S"], i["agent_id"]["S"]) for i in page.get("Items", []))
        return found

    def _transition(
        self,
        key: str,
        status: str,
        *,
        tenant_id: str,
        agent_id: str,
        turn_id: str,
        held: str = STATUS_PAUSED,
        due_at: float | None = None,
    ) -> Continuation:
        """`held` -> `status` for exactly this tenant, agent and turn (a claimed one only once its
        deadline passed); raises _Taken (with the item as it was) when the condition fails.
        `due_at`: the claim stays in the sweep's index, due then; else it leaves the index."""
        now = self._clock()
        ref = secrets.token_hex(8)
        names = {
            "#s": "status",
            "#pk": n.CONTINUATIONS.pk,
            "#open": n.CONTINUATION_ATTR_WAIT_OPEN,
            "#due": n.CONTINUATION_ATTR_WAIT_DUE,
            "#ref": _ATTR_CLAIM_REF,
        }
        values = {
            ":new": {"S": status},
            ":held": {"S": held},
            ":now": {"N": str(int(now))},
            ":ref": {"S": ref},
            ":t": {"S": tenant_id},
            ":a": {"S": agent_id},
            ":turn": {"S": turn_id},
        }
        condition = (
            "attribute_exists(#pk) AND #s = :held AND tenant_id = :t AND agent_id = :a AND turn_id = :turn"
        )
        if held == STATUS_CLAIMED:
            condition += " AND #due <= :due_now"
            values[":due_now"] = {"S": _due_key(now)}
        if due_at is None:
            update = "SET #s = :new, claimed_at = :now, #ref = :ref REMOVE #open, #due"
        else:
            update = "SET #s = :new, claimed_at = :now, #ref = :ref, #open = :open, #due = :due"
            values[":open"] = {"S": n.CONTINUATION_WAIT_OPEN_VALUE}
            values[":due"] = {"S": _due_key(due_at)}
        try:
            answer = self.client.update_item(
                TableName=self.table_name,
                Key=n.CONTINUATIONS.key(key),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                raise _Taken(exc.response.get("Item")) from None
            raise SandboxError(STORE_UNAVAILABLE, failure_reason=f"continuation_store:{_code(exc)}") from None
        except BotoCoreError as exc:
            raise SandboxError(STORE_UNAVAILABLE, failure_reason=f"continuation_store:{_code(exc)}") from None
        item = answer["Attributes"]
        data = json.loads(zlib.decompress(bytes(item["state"]["B"])).decode("utf-8"))
        data["stdout_head"] = zlib.decompress(bytes(item["stdout_head"]["B"]))
        data["stderr_head"] = zlib.decompress(bytes(item["stderr_head"]["B"]))
        return Continuation(
            tenant_id=item["tenant_id"]["S"],
            agent_id=item["agent_id"]["S"],
            turn_id=item["turn_id"]["S"],
            call=json.loads(item["call"]["S"]),
            state=ToolCallState.from_dict(data),
            key=key,
            claim_ref=ref,
            interrupted=held == STATUS_CLAIMED,
        )


class _Taken(Exception):  # noqa: N818 — a lost condition, not an error
    """A transition's condition failed; `item`: the continuation as it was (None: unknown)."""

    def __init__(self, item: dict[str, Any] | None) -> None:
        super().__init__("taken")
        self.item = item


def _settled(store: ContinuationStore, claimed: Continuation) -> dict[str, Any]:
    """The Update that settles a claimed continuation without an answer (it paused again)."""
    return {
        "TableName": store.table_name,
        "Key": n.CONTINUATIONS.key(claimed.key),
        "UpdateExpression": "SET #s = :settled REMOVE #open, #due, #state, stdout_head, stderr_head",
        "ConditionExpression": "#ref = :ref",
        "ExpressionAttributeNames": {
            "#s": "status",
            "#ref": _ATTR_CLAIM_REF,
            "#open": n.CONTINUATION_ATTR_WAIT_OPEN,
            "#due": n.CONTINUATION_ATTR_WAIT_DUE,
            "#state": "state",
        },
        "ExpressionAttributeValues": {":settled": {"S": STATUS_SETTLED}, ":ref": {"S": claimed.claim_ref}},
    }


def _due_key(epoch_seconds: float) -> str:
    """The by_wait_due sort key: epoch milliseconds, zero-padded so strings sort as numbers (a
    call is listed once `now >= paused + wait` to the millisecond: never early, never a second late)."""
    return f"{int(epoch_seconds * 1000):015d}"


def _code(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code") or "Unknown")
    return type(exc).__name__


@functools.cache
def continuations(parts: Parts) -> ContinuationStore:
    """The container's continuations table (built when tool calling first needs it)."""
    return ContinuationStore(parts.settings.continuations_table)
