"""Continuations of paused tool-calling calls (SPEC §15): single-use, bound to tenant, agent and turn.

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
"""

from __future__ import annotations

import hashlib
import json
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
from sandbox_common.errors import SandboxError, SandboxInvalidRequest
from sandbox_runtime.runner.tool_calling import ToolCallState

TOKEN_BYTES = 32
TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")  # 32 random bytes, URL-safe base64 without padding
STATUS_PAUSED = "paused"
STATUS_CLAIMED = "claimed"
STATUS_EXPIRED = "expired"
# A paused item outlives the wait bound by a day, so a late resume still finds it and can end
# the call as a timeout (with its audit row) instead of answering "unknown".
GRACE_SECONDS = 86_400

INVALID_CONTINUATION = messages.CONTINUATION_INVALID
STORE_UNAVAILABLE = messages.CONTINUATION_STORE_UNAVAILABLE


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Continuation:
    """A claimed continuation: who it belongs to, the call's audit context and the runner state."""

    tenant_id: str
    agent_id: str
    turn_id: str
    call: dict[str, Any]
    state: ToolCallState


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
    ) -> str:
        """Store a pause; returns the token the agent must send back (only here, only once)."""
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
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item=item,
                ConditionExpression="attribute_not_exists(#pk)",
                ExpressionAttributeNames={"#pk": n.CONTINUATIONS.pk},
            )
        except (ClientError, BotoCoreError) as exc:
            raise SandboxError(STORE_UNAVAILABLE, failure_reason=f"continuation_store:{_code(exc)}") from None
        return token

    def claim(self, token: Any, *, tenant_id: str, agent_id: str, turn_id: str) -> Continuation:
        """Consume a continuation for a resume. Anything but a paused continuation of exactly
        this tenant, agent and turn -> SandboxInvalidRequest (one answer for every case)."""
        if not isinstance(token, str) or not TOKEN_RE.match(token):
            raise SandboxInvalidRequest(INVALID_CONTINUATION)
        return self._transition(
            token_hash(token), STATUS_CLAIMED, tenant_id=tenant_id, agent_id=agent_id, turn_id=turn_id
        )

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
            except SandboxInvalidRequest:  # resumed concurrently: that resume owns it now
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
            try:
                claimed.append(
                    self._transition(
                        item[n.CONTINUATIONS.pk]["S"],
                        STATUS_EXPIRED,
                        tenant_id=item["tenant_id"]["S"],
                        agent_id=item["agent_id"]["S"],
                        turn_id=item["turn_id"]["S"],
                    )
                )
            except SandboxInvalidRequest:  # resumed or ended meanwhile: that caller owns it now
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
        self, key: str, status: str, *, tenant_id: str, agent_id: str, turn_id: str
    ) -> Continuation:
        try:
            answer = self.client.update_item(
                TableName=self.table_name,
                Key={n.CONTINUATIONS.pk: {"S": key}},
                UpdateExpression="SET #s = :new, claimed_at = :now REMOVE #open, #due",
                ConditionExpression=(
                    "attribute_exists(#pk) AND #s = :paused AND tenant_id = :t AND agent_id = :a AND turn_id"
                    " = :turn"
                ),
                ExpressionAttributeNames={
                    "#s": "status",
                    "#pk": n.CONTINUATIONS.pk,
                    "#open": n.CONTINUATION_ATTR_WAIT_OPEN,
                    "#due": n.CONTINUATION_ATTR_WAIT_DUE,
                },
                ExpressionAttributeValues={
                    ":new": {"S": status},
                    ":paused": {"S": STATUS_PAUSED},
                    ":now": {"N": str(int(self._clock()))},
                    ":t": {"S": tenant_id},
                    ":a": {"S": agent_id},
                    ":turn": {"S": turn_id},
                },
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                raise SandboxInvalidRequest(INVALID_CONTINUATION) from None
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
        )


def _due_key(epoch_seconds: float) -> str:
    """The by_wait_due sort key: epoch milliseconds, zero-padded so strings sort as numbers (a
    call is listed once `now >= paused + wait` to the millisecond: never early, never a second late)."""
    return f"{int(epoch_seconds * 1000):015d}"


def _code(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code") or "Unknown")
    return type(exc).__name__
