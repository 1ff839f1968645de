"""The session side of the egress table (naming.EGRESS): a session's proxy credential and the
reading of its counters.

- `issue`: a new session of an `allowlist` environment gets a random secret
  (`secrets.token_urlsafe(32)`); the `credential` item stores its SHA-256 with the tenant, the
  environment and an expiry (the session's own time-to-live), never the secret itself. The write
  is conditional on no credential existing for that session, so a session id never gets two.
- `revoke`: the session stopped; `revoked_at` is set once and the proxy refuses the credential
  from then on.
- `counters`: the session's `counters` item, which only the proxy writes (sandbox_common.egress_usage);
- `attributed` / `attribute`: the counters as far as the session's calls' rows have taken them.
  The proxy adds allowed requests and bytes to `counters` about once a second, so a reading at a
  call's end can miss its last moments; the next call starts from the last reading a row took
  (not from a fresh one), so those bytes are in the next row rather than in none.

Written by the session runner (dispatch and the reaper, with their own roles, not the tenant's
runner role); read by dispatch and a job's end. The secret is handed to the session once, in its
readiness call, and kept nowhere else.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from typing import Any

from sandbox_common import naming as n
from sandbox_common.egress_usage import FIELDS, Counters

CREDENTIAL_EXPIRY_MARGIN_SECONDS = 60  # clocks differ a little between the runner and the proxy


class EgressStoreUnavailable(Exception):
    """The egress table could not be read or written; `reason` is a short code."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def secret_sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class EgressStore:
    def __init__(self, *, table_name: str, ddb: Any, clock: Callable[[], float] = time.time) -> None:
        self.table_name = table_name
        self.ddb = ddb
        self.clock = clock

    def issue(self, session_id: str, *, tenant_id: str, environment: str, lifetime_seconds: int) -> str:
        """A new credential for `session_id`; returns its secret. Raises EgressStoreUnavailable."""
        from botocore.exceptions import BotoCoreError, ClientError

        secret = secrets.token_urlsafe(32)
        now = int(self.clock())
        item = {
            **n.EGRESS.key(session_id, n.EGRESS_CREDENTIAL_ITEM),
            n.EGRESS_ATTR_TENANT: {"S": tenant_id},
            n.EGRESS_ATTR_ENVIRONMENT: {"S": environment},
            n.EGRESS_ATTR_SECRET_SHA256: {"S": secret_sha256(secret)},
            n.EGRESS_ATTR_ISSUED_AT: {"N": str(now)},
            n.TTL_ATTRIBUTE: {"N": str(now + lifetime_seconds + CREDENTIAL_EXPIRY_MARGIN_SECONDS)},
        }
        try:
            self.ddb.put_item(
                TableName=self.table_name,
                Item=item,
                ConditionExpression="attribute_not_exists(#pk)",
                ExpressionAttributeNames={"#pk": n.EGRESS.pk},
            )
        except ClientError as exc:
            raise EgressStoreUnavailable(f"issue:{_code(exc)}") from None
        except BotoCoreError as exc:
            raise EgressStoreUnavailable(f"issue:{type(exc).__name__}") from None
        return secret

    def revoke(self, session_id: str) -> bool:
        """Mark the session's credential revoked. True when it is revoked now or already was, or
        none was ever issued; raises EgressStoreUnavailable when the table could not be written."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.ddb.update_item(
                TableName=self.table_name,
                Key=n.EGRESS.key(session_id, n.EGRESS_CREDENTIAL_ITEM),
                UpdateExpression="SET #r = :now",
                ConditionExpression="attribute_exists(#pk) AND attribute_not_exists(#r)",
                ExpressionAttributeNames={"#pk": n.EGRESS.pk, "#r": n.EGRESS_ATTR_REVOKED_AT},
                ExpressionAttributeValues={":now": {"N": str(int(self.clock()))}},
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return True  # none issued, or revoked before
            raise EgressStoreUnavailable(f"revoke:{_code(exc)}") from None
        except BotoCoreError as exc:
            raise EgressStoreUnavailable(f"revoke:{type(exc).__name__}") from None
        return True

    def counters(self, session_id: str) -> Counters:
        """The session's counters now (zero before the proxy wrote any). Raises EgressStoreUnavailable."""
        return self._read(session_id, n.EGRESS_COUNTERS_ITEM)

    def attributed(self, session_id: str) -> Counters:
        """The counters the session's calls' rows have taken (zero before its first call ended)."""
        return self._read(session_id, n.EGRESS_ATTRIBUTED_ITEM)

    def attribute_put(self, session_id: str, counters: Counters, lifetime_seconds: int) -> dict[str, Any]:
        """The same record as a TransactWriteItems Put, unconditional: it rides a call's record
        transaction, which no condition of its own may cancel (two calls of one turn ending out of
        order can leave the earlier reading: the next row then counts a little twice, never less)."""
        return {
            "Put": {
                "TableName": self.table_name,
                "Item": self._attributed_item(session_id, counters, lifetime_seconds),
            }
        }

    def _attributed_item(self, session_id: str, counters: Counters, lifetime_seconds: int) -> dict[str, Any]:
        item: dict[str, Any] = {
            **n.EGRESS.key(session_id, n.EGRESS_ATTRIBUTED_ITEM),
            **{f: {"N": str(getattr(counters, f))} for f in FIELDS},
            n.TTL_ATTRIBUTE: {
                "N": str(int(self.clock()) + lifetime_seconds + CREDENTIAL_EXPIRY_MARGIN_SECONDS)
            },
        }
        if counters.cap_refused is not None:
            item[n.EGRESS_ATTR_CAP_REFUSED] = {
                "M": {
                    "dimension": {"S": counters.cap_refused[0]},
                    "count": {"N": str(counters.cap_refused[1])},
                }
            }
        return item

    def attribute(self, session_id: str, counters: Counters, lifetime_seconds: int) -> bool:
        """Record that rows have taken the session's counters up to `counters`; never moves back
        (a call that read earlier and ends later leaves a later reading in place). False when a
        later reading was there already. Raises EgressStoreUnavailable."""
        from botocore.exceptions import BotoCoreError, ClientError

        values = {f: getattr(counters, f) for f in FIELDS}
        item = self._attributed_item(session_id, counters, lifetime_seconds)
        names = {f"#f{i}": f for i, f in enumerate(FIELDS)}
        condition = (
            "attribute_not_exists(#pk) OR ("
            + " AND ".join(f"#f{i} <= :f{i}" for i in range(len(FIELDS)))
            + ")"
        )
        try:
            self.ddb.put_item(
                TableName=self.table_name,
                Item=item,
                ConditionExpression=condition,
                ExpressionAttributeNames={"#pk": n.EGRESS.pk, **names},
                ExpressionAttributeValues={f":f{i}": {"N": str(values[f])} for i, f in enumerate(FIELDS)},
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise EgressStoreUnavailable(f"attribute:{_code(exc)}") from None
        except BotoCoreError as exc:
            raise EgressStoreUnavailable(f"attribute:{type(exc).__name__}") from None
        return True

    def _read(self, session_id: str, item_name: str) -> Counters:
        from boto3.dynamodb.types import TypeDeserializer
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = self.ddb.get_item(
                TableName=self.table_name, Key=n.EGRESS.key(session_id, item_name), ConsistentRead=True
            )
        except ClientError as exc:
            raise EgressStoreUnavailable(f"{item_name}:{_code(exc)}") from None
        except BotoCoreError as exc:
            raise EgressStoreUnavailable(f"{item_name}:{type(exc).__name__}") from None
        item = answer.get("Item")
        if not item:
            return Counters()
        deserializer = TypeDeserializer()
        return Counters.from_item({k: deserializer.deserialize(v) for k, v in item.items()})


def _code(exc: Any) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code") or "Unknown")
