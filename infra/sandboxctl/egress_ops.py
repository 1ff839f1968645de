"""`sandboxctl egress …` and `sandboxctl secrets …`: a tenant × environment's egress policy (SSM),
a live session's connections (the EGRESS table), and the tenant's secrets (Secrets Manager). The
same calls against a deployed stage and against the local stack's emulated AWS.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError
from sandbox_common import naming as n
from sandbox_common.egress_policy import (
    ALLOWLIST,
    NONE,
    EgressPolicy,
    PolicyError,
    merge_allow_specs,
    normalize_host,
    parse_policy,
)

from infra.sandboxctl.errors import CtlError
from infra.sandboxctl.items import error_code, parameter_value
from infra.sandboxctl.ops import require_known_tenant, tenant_show
from infra.sandboxctl.target import Target

APPLIES_WITHIN_SECONDS = 60
MIN_SECRET_CHARS = 8  # shorter values could not be told apart from ordinary text when scrubbed
MAX_SECRET_BYTES = 64 * 1024
# The policy is stored in one SSM parameter (Intelligent-Tiering: an advanced one past 4 KB), whose
# value AWS limits to 8 KB; moto does not, so the local stack would store what a stage refuses.
MAX_POLICY_BYTES = 8 * 1024
CONNECTION_COLUMNS = (
    "opened_at",
    "host",
    "port",
    "decision",
    "reason",
    "requests",
    "bytes_out",
    "bytes_in",
    "closed_at",
)


def _tenants_allowlist_environment(target: Target, tenant_id: str, environment: str) -> None:
    """The tenant exists, `environment` is an allowlist one, and it is one of the tenant's: a
    policy stored for an environment the tenant lacks would apply to nothing now and silently to
    whatever later gives the tenant that environment."""
    _allowlist_environment(environment)
    environments = tenant_show(target, tenant_id, history=0)["environments"]
    if environment not in environments:
        raise CtlError(
            f"refused: environment: tenant {tenant_id} has no {environment} environment"
            f" (its environments: {', '.join(environments) or 'none'})"
        )


def _allowlist_environment(environment: str) -> None:
    if n.EGRESS_MODE.get(environment) != ALLOWLIST:
        raise CtlError(
            f"refused: environment: {environment} has egress {n.EGRESS_MODE.get(environment, 'unknown')!r};"
            f" only an allowlist environment has a policy"
            f" ({', '.join(e for e in n.ENVIRONMENTS if n.EGRESS_MODE[e] == ALLOWLIST)})"
        )


# --- policy ------------------------------------------------------------------------------------
def egress_get(target: Target, tenant_id: str, environment: str) -> dict[str, Any]:
    _tenants_allowlist_environment(target, tenant_id, environment)
    name = n.egress_policy_parameter(target.stage, tenant_id, environment)
    raw = parameter_value(target.client("ssm"), name)
    if raw is None:  # what the proxy applies when none is stored: nothing allowed
        return {"parameter": name, "stored": False, **EgressPolicy().as_dict()}
    try:
        policy = parse_policy(raw)
    except PolicyError as exc:
        raise CtlError(
            f"the stored policy {name} is not valid ({exc}); the proxy refuses everything"
        ) from None
    return {"parameter": name, "stored": True, **policy.as_dict()}


def build_policy(
    allow: Sequence[str], credentials: Sequence[str], packages: Sequence[str], *, closed: bool
) -> dict[str, Any]:
    """The policy document the command line describes (validated by `parse_policy` after)."""
    if closed:
        if allow or credentials or packages:
            raise PolicyError("egress", "--none allows nothing: drop --allow, --credential and --packages")
        return {"egress": NONE, "allow": [], "packages": []}
    rules = merge_allow_specs(allow)
    by_host = {str(rule["host"]): rule for rule in rules}
    for i, spec in enumerate(credentials):
        where = f"credential[{i}]"
        host, sep, rest = spec.partition("=")
        header, colon, template = rest.partition(":")
        if not sep or not colon or not host or not header or not template:
            raise PolicyError(
                where,
                f"{spec!r}: expected HOST=HEADER:TEMPLATE,"
                " e.g. api.example.com=Authorization:Bearer {secret:crm-token}",
            )
        rule = by_host.get(normalize_host(host))
        if rule is None:
            raise PolicyError(where, f"{host} is not an allowed host: add --allow {host}")
        if "credential" in rule:
            raise PolicyError(where, f"{host} already has a credential")
        rule["credential"] = {"header": header.strip(), "template": template.strip()}
    return {"egress": ALLOWLIST, "allow": rules, "packages": list(packages)}


def egress_set(
    target: Target,
    tenant_id: str,
    environment: str,
    *,
    allow: Sequence[str] = (),
    credentials: Sequence[str] = (),
    packages: Sequence[str] = (),
    closed: bool = False,
) -> dict[str, Any]:
    """Replace the policy (validated: the field is named in the refusal; a credential's secrets
    must be among the tenant's own). The proxy applies it within APPLIES_WITHIN_SECONDS."""
    _tenants_allowlist_environment(target, tenant_id, environment)
    try:
        document = build_policy(allow, credentials, packages, closed=closed)
        secrets = set(secret_names(target, tenant_id)) if credentials else set()
        policy = parse_policy(document, secrets=secrets)
    except PolicyError as exc:
        raise CtlError(f"refused: {exc}") from None
    value = policy.to_json()
    if len(value.encode("utf-8")) > MAX_POLICY_BYTES:
        raise CtlError(
            f"refused: the policy is {len(value.encode('utf-8'))} bytes as stored; its SSM parameter"
            f" holds at most {MAX_POLICY_BYTES} (fewer or shorter hosts, or one suffix rule for many)"
        )
    name = n.egress_policy_parameter(target.stage, tenant_id, environment)
    ssm = target.client("ssm")
    previous = parameter_value(ssm, name)
    ssm.put_parameter(Name=name, Value=value, Type="String", Overwrite=True, Tier="Intelligent-Tiering")
    return {
        "parameter": name,
        "tenant_id": tenant_id,
        "environment": environment,
        "policy": policy.as_dict(),
        "previous": json.loads(previous) if previous else None,
        "applies_within_seconds": APPLIES_WITHIN_SECONDS,
    }


# --- a session's connections -------------------------------------------------------------------
def egress_show(target: Target, session_id: str) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeDeserializer

    ddb = target.client("dynamodb")
    deser = TypeDeserializer()
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {
        "TableName": target.table(n.EGRESS),
        "KeyConditionExpression": "#pk = :s",
        "ExpressionAttributeNames": {"#pk": n.EGRESS.pk},
        "ExpressionAttributeValues": {":s": {"S": session_id}},
        "ConsistentRead": True,
    }
    while True:
        page = ddb.query(**kwargs)
        items += [{k: deser.deserialize(v) for k, v in item.items()} for item in page.get("Items", [])]
        if not page.get("LastEvaluatedKey"):
            break
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    by_sk = {str(item[n.EGRESS.sort_key]): item for item in items}
    credential = by_sk.get(n.EGRESS_CREDENTIAL_ITEM)
    if credential is None:
        raise CtlError(
            f"no egress credential for session {session_id!r}: not an allowlist session of this stage"
        )
    counters = by_sk.get(n.EGRESS_COUNTERS_ITEM) or {}
    connections = [
        {column: _plain(item.get(column)) for column in CONNECTION_COLUMNS}
        for sk, item in sorted(by_sk.items())
        if sk.startswith(n.EGRESS_CONNECTION_PREFIX)
    ]
    for row in connections:
        for column in ("opened_at", "closed_at"):
            if isinstance(row[column], int):
                row[column] = _iso(row[column])
    hosts = counters.get(n.EGRESS_ATTR_DENIED_HOSTS) or {}
    return {
        "session_id": session_id,
        "tenant_id": credential.get(n.EGRESS_ATTR_TENANT),
        "environment": credential.get(n.EGRESS_ATTR_ENVIRONMENT),
        "source": credential.get(n.EGRESS_ATTR_SOURCE),
        "issued_at": _iso(credential.get(n.EGRESS_ATTR_ISSUED_AT)),
        "revoked_at": _iso(credential.get(n.EGRESS_ATTR_REVOKED_AT)),
        "live": n.EGRESS_ATTR_REVOKED_AT not in credential,
        "counters": {
            name: _plain(counters.get(name)) or 0
            for name in (
                n.EGRESS_ATTR_ALLOWED,
                n.EGRESS_ATTR_DENIED,
                n.EGRESS_ATTR_BYTES_OUT,
                n.EGRESS_ATTR_BYTES_IN,
            )
        },
        "denied_hosts": [
            str(entry.get("host"))
            for _, entry in sorted(hosts.items(), key=lambda kv: int(kv[0]))
            if isinstance(entry, dict)
        ],
        "cap_refused": _plain(counters.get(n.EGRESS_ATTR_CAP_REFUSED)),
        "connections": connections,
    }


def _plain(value: Any) -> Any:
    """DynamoDB numbers as ints, maps and lists as plain JSON."""
    from decimal import Decimal

    if isinstance(value, Decimal):
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _iso(epoch: Any) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the tenant's secrets ------------------------------------------------------------------------
def secret_names(target: Target, tenant_id: str) -> list[str]:
    prefix = n.tenant_secrets_prefix(target.stage, tenant_id)
    client = target.client("secretsmanager")
    names: list[str] = []
    kwargs: dict[str, Any] = {"Filters": [{"Key": "name", "Values": [prefix]}], "MaxResults": 100}
    while True:
        page = client.list_secrets(**kwargs)
        names += [
            s["Name"][len(prefix) :] for s in page.get("SecretList", []) if s["Name"].startswith(prefix)
        ]
        if not page.get("NextToken"):
            break
        kwargs["NextToken"] = page["NextToken"]
    return sorted(name for name in names if n.SECRET_NAME_RE.match(name))


def secrets_list(target: Target, tenant_id: str) -> dict[str, Any]:
    require_known_tenant(target, tenant_id)
    return {"tenant_id": tenant_id, "secrets": secret_names(target, tenant_id)}


def secrets_put(target: Target, tenant_id: str, name: str, value: str) -> dict[str, Any]:
    """Create or replace the tenant's secret NAME; the value is never echoed."""
    require_known_tenant(target, tenant_id)
    if value.endswith("\n"):
        value = value[:-1].removesuffix("\r")
    if len(value) < MIN_SECRET_CHARS:
        raise CtlError(
            f"refused: the value on standard input has {len(value)} characters; a secret needs at least"
            f" {MIN_SECRET_CHARS} (the proxy replaces its value in responses, and a short one would match"
            " ordinary text)"
        )
    if len(value.encode("utf-8")) > MAX_SECRET_BYTES or "\0" in value:
        raise CtlError(f"refused: a secret is at most {MAX_SECRET_BYTES} bytes of text")
    if any((ord(c) < 32 and c != "\t") or ord(c) == 127 or c in "\x85\u2028\u2029" for c in value):
        raise CtlError(
            "refused: the value on standard input holds a line break or another control character;"
            " the proxy writes a secret into one header line, so a secret is one line of text"
        )
    secret_id = n.tenant_secret_name(target.stage, tenant_id, name)
    client = target.client("secretsmanager")
    try:
        out = client.create_secret(
            Name=secret_id,
            SecretString=value,
            Description=f"egress credential secret of tenant {tenant_id}",
            Tags=[{"Key": "tenant_id", "Value": tenant_id}],
        )
        created = True
    except ClientError as exc:
        if error_code(exc) != "ResourceExistsException":
            raise
        out = client.put_secret_value(SecretId=secret_id, SecretString=value)
        created = False
    return {
        "tenant_id": tenant_id,
        "name": name,
        "secret": secret_id,
        "created": created,
        "version": out.get("VersionId"),
    }
