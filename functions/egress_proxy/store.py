"""The proxy's data access (boto3, blocking: the engine runs every call in a worker thread).

- EGRESS table: a session's `credential` item (read; its `source` bound once, conditionally), its
  `counters` item (denials written one by one, before the refusal is answered; allowed counts and
  bytes added in batches) and its `conn#...` items (one per connection, for `sandboxctl egress
  show`);
- TENANT_DAILY_COUNTERS: the tenant's `egress_daily_bytes` counter of the UTC day;
- SSM: the tenant × environment egress policy, the caps (through Common's cap readers);
- TENANTS / SSM: whether the tenant is enabled (Common's `tenant_access`);
- Secrets Manager: the tenant's secrets a credential template names;
- CodeArtifact: the package index's authorization token (AWS only).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.config import Config
from botocore.exceptions import ClientError
from sandbox_common import aws, dimensions, tenant_access
from sandbox_common import naming as n
from sandbox_common.cap_values import ByteCapValues, CallCapValues
from sandbox_common.egress_policy import EMPTY_ALLOWLIST, EgressPolicy, parse_policy
from sandbox_common.windows import Windows

# A session's items outlive its credential by this much (the reaper and the audit row read them).
ITEMS_OUTLIVE_CREDENTIAL_SECONDS = 24 * 3600
_CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 2},
    connect_timeout=2,
    read_timeout=5,
    max_pool_connections=32,
)


class StoreUnavailable(Exception):
    """A read the decision needs failed: the engine refuses (fail closed)."""


@dataclass
class SessionDelta:
    """What a session's connections added since the last flush."""

    tenant_id: str
    expires_at: int
    allowed: int = 0
    denied: int = 0  # denials of a flood, beyond those written one by one
    bytes_out: int = 0
    bytes_in: int = 0
    connections: dict[str, dict[str, Any]] = field(default_factory=dict)  # conn item sk -> attributes

    @property
    def empty(self) -> bool:
        return not (self.allowed or self.denied or self.bytes_out or self.bytes_in or self.connections)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _plain(item: Mapping[str, Any]) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeDeserializer

    deser = TypeDeserializer()
    return {k: deser.deserialize(v) for k, v in item.items()}


def _wire(value: Any) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeSerializer

    return dict(TypeSerializer().serialize(value))


class EgressStore:
    def __init__(
        self,
        *,
        stage: str,
        egress_table: str,
        counters_table: str,
        tenants_table: str,
        cache_seconds: int,
        codeartifact: tuple[str, str] | None = None,  # (domain, owner account)
    ) -> None:
        self.stage = stage
        self.egress_table = egress_table
        self.counters_table = counters_table
        self.tenants_table = tenants_table
        self.codeartifact = codeartifact
        self._clients: dict[str, Any] = {}
        self.call_caps = CallCapValues(stage=stage, ssm=self.client("ssm"), ttl_seconds=cache_seconds)
        self.byte_caps = ByteCapValues(stage=stage, ssm=self.client("ssm"), ttl_seconds=cache_seconds)

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = aws.new_client(service, config=_CLIENT_CONFIG)
        return self._clients[service]

    # --- credential --------------------------------------------------------------------------
    def credential_item(self, session_id: str) -> dict[str, Any] | None:
        try:
            out = self.client("dynamodb").get_item(
                TableName=self.egress_table,
                Key=n.EGRESS.key(session_id, n.EGRESS_CREDENTIAL_ITEM),
                ConsistentRead=True,
            )
        except Exception as exc:  # noqa: BLE001 — any failure refuses
            raise StoreUnavailable(f"egress:{type(exc).__name__}") from None
        item = out.get("Item")
        return None if item is None else _plain(item)

    def bind_source(self, session_id: str, secret_sha256: str, source: str) -> bool:
        """Record `source` on the credential iff none is recorded yet (and it is the same secret and
        not revoked). False when the condition failed (someone bound it first, or it changed)."""
        try:
            self.client("dynamodb").update_item(
                TableName=self.egress_table,
                Key=n.EGRESS.key(session_id, n.EGRESS_CREDENTIAL_ITEM),
                UpdateExpression="SET #s = :s",
                ConditionExpression="attribute_not_exists(#s) AND #h = :h AND attribute_not_exists(#r)",
                ExpressionAttributeNames={
                    "#s": n.EGRESS_ATTR_SOURCE,
                    "#h": n.EGRESS_ATTR_SECRET_SHA256,
                    "#r": n.EGRESS_ATTR_REVOKED_AT,
                },
                ExpressionAttributeValues={":s": {"S": source}, ":h": {"S": secret_sha256}},
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise StoreUnavailable(f"egress:{_code(exc)}") from None
        except Exception as exc:  # noqa: BLE001
            raise StoreUnavailable(f"egress:{type(exc).__name__}") from None
        return True

    # --- policy, breakers, secrets -----------------------------------------------------------
    def policy(self, tenant_id: str, environment: str) -> EgressPolicy:
        """The stored policy; a missing parameter is an empty allowlist (nothing allowed). Raises
        StoreUnavailable when it cannot be read or parsed (the engine refuses)."""
        name = n.egress_policy_parameter(self.stage, tenant_id, environment)
        try:
            raw = self.client("ssm").get_parameter(Name=name)["Parameter"]["Value"]
        except ClientError as exc:
            if _code(exc) == "ParameterNotFound":
                return EMPTY_ALLOWLIST
            raise StoreUnavailable(f"ssm:{_code(exc)}") from None
        except Exception as exc:  # noqa: BLE001
            raise StoreUnavailable(f"ssm:{type(exc).__name__}") from None
        try:
            return parse_policy(raw)
        except ValueError as exc:
            raise StoreUnavailable(f"policy {name} unreadable: {exc}") from None

    def tenant_enabled(self, tenant_id: str) -> bool:
        try:
            return tenant_access.tenant_enabled(
                ssm=self.client("ssm"),
                ddb=self.client("dynamodb"),
                stage=self.stage,
                tenants_table=self.tenants_table,
                tenant_id=tenant_id,
            )
        except tenant_access.TenantStateUnavailable as exc:
            raise StoreUnavailable(str(exc)) from None

    def calls_cap_at_zero(self, tenant_id: str) -> str | None:
        """The calls dimension whose cap in force for the tenant is 0 (the kill switch), or None."""
        try:
            values = self.call_caps.values_for(tenant_id)
        except Exception as exc:  # noqa: BLE001 — CapsUnavailable and anything else: refuse
            raise StoreUnavailable(f"caps:{getattr(exc, 'reason', type(exc).__name__)}") from None
        return next((d.name for d in dimensions.calls() if values.get(d.name) == 0), None)

    def byte_cap(self, tenant_id: str) -> int:
        try:
            return self.byte_caps.values_for(tenant_id)[dimensions.EGRESS_DAILY_BYTES.name]
        except Exception as exc:  # noqa: BLE001
            raise StoreUnavailable(f"caps:{getattr(exc, 'reason', type(exc).__name__)}") from None

    def tenant_bytes(self, tenant_id: str, windows: Windows) -> int:
        dim = dimensions.EGRESS_DAILY_BYTES
        assert dim.table is not None
        key = dim.counter_key({n.COUNTER_ATTR_TENANT: tenant_id}, windows)
        try:
            out = self.client("dynamodb").get_item(
                TableName=self.counters_table, Key=dim.table.key(key), ConsistentRead=True
            )
        except Exception as exc:  # noqa: BLE001
            raise StoreUnavailable(f"counters:{type(exc).__name__}") from None
        value = (out.get("Item") or {}).get(n.COUNTER_ATTR_BYTES, {}).get("N")
        return int(value) if value is not None else 0

    def secret(self, tenant_id: str, name: str) -> str | None:
        """The tenant's secret value, None when it does not exist."""
        try:
            out = self.client("secretsmanager").get_secret_value(
                SecretId=n.tenant_secret_name(self.stage, tenant_id, name)
            )
        except ClientError as exc:
            if _code(exc) == "ResourceNotFoundException":
                return None
            raise StoreUnavailable(f"secretsmanager:{_code(exc)}") from None
        except Exception as exc:  # noqa: BLE001
            raise StoreUnavailable(f"secretsmanager:{type(exc).__name__}") from None
        value = out.get("SecretString")
        return value if isinstance(value, str) else None

    def index_token(self) -> tuple[str, float]:
        """The package index's CodeArtifact authorization token and when it expires (epoch s)."""
        if self.codeartifact is None:
            raise StoreUnavailable("no package index token configured")
        domain, owner = self.codeartifact
        try:
            out = self.client("codeartifact").get_authorization_token(
                domain=domain, domainOwner=owner, durationSeconds=3600
            )
        except Exception as exc:  # noqa: BLE001
            raise StoreUnavailable(f"codeartifact:{type(exc).__name__}") from None
        return str(out["authorizationToken"]), out["expiration"].timestamp()

    # --- counters and the connection log -----------------------------------------------------
    def record_denial(
        self, session_id: str, host: str, expires_at: int, connection: tuple[str, dict[str, Any]] | None
    ) -> int:
        """Count one denial of the session and keep its (redacted) host under its sequence number;
        returns the sequence number. Written before the refusal is answered."""
        ddb = self.client("dynamodb")
        key = n.EGRESS.key(session_id, n.EGRESS_COUNTERS_ITEM)
        try:
            out = ddb.update_item(
                TableName=self.egress_table,
                Key=key,
                UpdateExpression="ADD #d :one SET #h = if_not_exists(#h, :empty), #e = :e",
                ExpressionAttributeNames={
                    "#d": n.EGRESS_ATTR_DENIED,
                    "#h": n.EGRESS_ATTR_DENIED_HOSTS,
                    "#e": n.TTL_ATTRIBUTE,
                },
                ExpressionAttributeValues={
                    ":one": {"N": "1"},
                    ":empty": {"M": {}},
                    ":e": {"N": str(expires_at)},
                },
                ReturnValues="UPDATED_NEW",
            )
            seq = int(out["Attributes"][n.EGRESS_ATTR_DENIED]["N"])
            old = seq - n.EGRESS_DENIED_HOSTS_KEPT
            names = {"#h": n.EGRESS_ATTR_DENIED_HOSTS, "#s": str(seq)}
            expression = "SET #h.#s = :entry"
            if old > 0:
                names["#o"] = str(old)
                expression += " REMOVE #h.#o"
            entry = {"M": {"host": {"S": host}, "seq": {"N": str(seq)}}}
            ddb.update_item(
                TableName=self.egress_table,
                Key=key,
                UpdateExpression=expression,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={":entry": entry},
            )
            if connection is not None:
                self._put_connection(session_id, connection[0], connection[1], expires_at)
        except Exception as exc:  # noqa: BLE001
            raise StoreUnavailable(f"egress:{type(exc).__name__}") from None
        return seq

    def record_cap_refused(self, session_id: str, dimension: str, at: int, expires_at: int) -> None:
        """`cap_refused` = {dimension, count, at}: the dimension that last refused the session a
        connection, how many refusals there were in all, and when the last one was."""
        ddb = self.client("dynamodb")
        key = n.EGRESS.key(session_id, n.EGRESS_COUNTERS_ITEM)
        ddb.update_item(
            TableName=self.egress_table,
            Key=key,
            UpdateExpression="SET #c = if_not_exists(#c, :empty), #e = :e",
            ExpressionAttributeNames={"#c": n.EGRESS_ATTR_CAP_REFUSED, "#e": n.TTL_ATTRIBUTE},
            ExpressionAttributeValues={":empty": {"M": {}}, ":e": {"N": str(expires_at)}},
        )
        ddb.update_item(
            TableName=self.egress_table,
            Key=key,
            UpdateExpression="SET #c.#d = :d, #c.#a = :a ADD #c.#n :one",
            ExpressionAttributeNames={
                "#c": n.EGRESS_ATTR_CAP_REFUSED,
                "#d": "dimension",
                "#a": "at",
                "#n": "count",
            },
            ExpressionAttributeValues={":d": {"S": dimension}, ":a": {"N": str(at)}, ":one": {"N": "1"}},
        )

    def flush(self, deltas: Mapping[str, SessionDelta], windows: Windows) -> None:
        """Add each session's allowed count and bytes to its counters, each tenant's bytes to its
        daily counter, and write the connections that changed."""
        ddb = self.client("dynamodb")
        by_tenant: dict[str, int] = {}
        for session_id, delta in deltas.items():
            if delta.allowed or delta.denied or delta.bytes_out or delta.bytes_in:
                ddb.update_item(
                    TableName=self.egress_table,
                    Key=n.EGRESS.key(session_id, n.EGRESS_COUNTERS_ITEM),
                    UpdateExpression="ADD #a :a, #d :d, #o :o, #i :i SET #e = :e",
                    ExpressionAttributeNames={
                        "#a": n.EGRESS_ATTR_ALLOWED,
                        "#d": n.EGRESS_ATTR_DENIED,
                        "#o": n.EGRESS_ATTR_BYTES_OUT,
                        "#i": n.EGRESS_ATTR_BYTES_IN,
                        "#e": n.TTL_ATTRIBUTE,
                    },
                    ExpressionAttributeValues={
                        ":a": {"N": str(delta.allowed)},
                        ":d": {"N": str(delta.denied)},
                        ":o": {"N": str(delta.bytes_out)},
                        ":i": {"N": str(delta.bytes_in)},
                        ":e": {"N": str(delta.expires_at)},
                    },
                )
            for sk, attributes in delta.connections.items():
                self._put_connection(session_id, sk, attributes, delta.expires_at)
            if delta.bytes_out or delta.bytes_in:
                by_tenant[delta.tenant_id] = (
                    by_tenant.get(delta.tenant_id, 0) + delta.bytes_out + delta.bytes_in
                )
        dim = dimensions.EGRESS_DAILY_BYTES
        assert dim.table is not None
        for tenant_id, count in by_tenant.items():
            key = dim.counter_key({n.COUNTER_ATTR_TENANT: tenant_id}, windows)
            ddb.update_item(
                TableName=self.counters_table,
                Key=dim.table.key(key),
                UpdateExpression="ADD #b :b SET #t = :t, #w = :w, #e = :e",
                ExpressionAttributeNames={
                    "#b": n.COUNTER_ATTR_BYTES,
                    "#t": n.COUNTER_ATTR_TENANT,
                    "#w": n.COUNTER_ATTR_WINDOW,
                    "#e": n.TTL_ATTRIBUTE,
                },
                ExpressionAttributeValues={
                    ":b": {"N": str(count)},
                    ":t": {"S": tenant_id},
                    ":w": {"S": dim.window_label(windows)},
                    ":e": {"N": str(int(dim.resets_at(windows).timestamp()) + 2 * 86400)},
                },
            )

    def _put_connection(self, session_id: str, sk: str, attributes: dict[str, Any], expires_at: int) -> None:
        item = {k: _wire(v) for k, v in attributes.items()}
        item.update(n.EGRESS.key(session_id, sk))
        item[n.TTL_ATTRIBUTE] = {"N": str(expires_at)}
        self.client("dynamodb").put_item(TableName=self.egress_table, Item=item)
