"""The proxy's engine (no mitmproxy) against moto: decisions for connections and requests, what
it writes to the session's counters and the tenant's byte counter, the breakers and resolution."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
from typing import Any

import pytest
from egress_proxy import checks
from egress_proxy.config import IndexSettings, ProxyConfig, Route
from egress_proxy.engine import Engine
from egress_proxy.model import ClientState, RequestView
from egress_proxy.store import EgressStore
from sandbox_common import aws, dimensions
from sandbox_common import naming as n
from sandbox_common.windows import Windows, utc_now

from tests.support.tables import STAGE, ddb, tables  # noqa: F401 - fixtures

SECRET = "the-session-secret"
INDEX = IndexSettings("packages.sandbox.internal", "/simple/")
POLICY = {
    "egress": "allowlist",
    "allow": [
        {
            "host": "api.example.com",
            "credential": {"header": "Authorization", "template": "Bearer {secret:crm}"},
        },
        {"host": "*.example.org", "ports": [443, 8443]},
        {"host": "meta.example.net"},
    ],
    "packages": ["sandbox-hello==1.0.0"],
}


def _put_policy(tenant: str, document: Any) -> None:
    aws.client("ssm").put_parameter(
        Name=n.egress_policy_parameter(STAGE, tenant, "default-allowlist"),
        Value=document if isinstance(document, str) else json.dumps(document),
        Type="String",
        Overwrite=True,
    )


@pytest.fixture
def engine(tables: dict[str, str]) -> Engine:  # noqa: F811 - the fixture
    ssm = aws.client("ssm")
    for d in dimensions.dimensions():
        ssm.put_parameter(Name=d.parameter(STAGE), Value=str(d.default), Type="String")
    for tenant in ("acme", "globex"):
        aws.client("dynamodb").put_item(
            TableName=tables[n.TENANTS.logical],
            Item={
                **n.TENANTS.key(tenant, n.TENANT_POLICY_ITEM),
                "sandbox_enabled": {"BOOL": True},
                "compliance_tier": {"S": "standard"},
            },
        )
        _put_policy(tenant, POLICY)
    aws.client("secretsmanager").create_secret(
        Name=n.tenant_secret_name(STAGE, "acme", "crm"), SecretString="crm-value-123"
    )
    config = ProxyConfig(
        stage=STAGE,
        egress_table=tables[n.EGRESS.logical],
        counters_table=tables[n.TENANT_DAILY_COUNTERS.logical],
        tenants_table=tables[n.TENANTS.logical],
        index=INDEX,
        routes=(Route("routed.example.org", "127.0.0.1", 9443),),
        resolve={"meta.example.net": "169.254.169.254", "pub.example.org": "93.184.216.34"},
        cache_seconds=20,
    )
    store = EgressStore(
        stage=STAGE,
        egress_table=config.egress_table,
        counters_table=config.counters_table,
        tenants_table=config.tenants_table,
        cache_seconds=20,
    )
    return Engine(config, store)


def _issue(
    session: str,
    tenant: str = "acme",
    *,
    source: str | None = "127.77.0.1",
    environment: str = "default-allowlist",
) -> str:
    item = {
        **n.EGRESS.key(session, n.EGRESS_CREDENTIAL_ITEM),
        "tenant_id": {"S": tenant},
        "environment": {"S": environment},
        "secret_sha256": {"S": hashlib.sha256(SECRET.encode()).hexdigest()},
        "expires_at": {"N": str(int(time.time()) + 3600)},
    }
    if source:
        item["source"] = {"S": source}
    aws.client("dynamodb").put_item(TableName=f"{n.PROJECT}-{STAGE}-{n.EGRESS.logical}", Item=item)
    return "Basic " + base64.b64encode(f"{session}:{SECRET}".encode()).decode()


def _item(session: str, sk: str) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeDeserializer

    got = aws.client("dynamodb").get_item(
        TableName=f"{n.PROJECT}-{STAGE}-{n.EGRESS.logical}",
        Key=n.EGRESS.key(session, sk),
        ConsistentRead=True,
    )
    return {k: TypeDeserializer().deserialize(v) for k, v in (got.get("Item") or {}).items()}


def _request(host: str, path: str = "/", **changes: Any) -> RequestView:
    fields: dict[str, Any] = {
        "method": "GET",
        "scheme": "https",
        "host": host,
        "port": 443,
        "path": path,
        "host_header": host,
        "authority": "",
        "proxy_authorization": None,
        "upgrade": None,
        "head_bytes": 100,
        "sni": host,
    }
    fields.update(changes)
    return RequestView(**fields)


def _tunnel(
    engine: Engine, auth: str, host: str, port: int = 443
) -> tuple[ClientState, checks.Denied | None]:
    state = ClientState(peer="127.77.0.1", opened=time.time())
    return state, asyncio.run(engine.open_tunnel(state, host, port, auth))


def test_engine_opens_a_tunnel_to_an_allowed_host_only(engine: Engine) -> None:
    auth = _issue("s1")
    assert _tunnel(engine, auth, "api.example.com")[1] is None
    assert _tunnel(engine, auth, "a.example.org", 8443)[1] is None
    assert _tunnel(engine, auth, "a.example.org", 444)[1] == checks.Denied(checks.PORT_NOT_ALLOWED)
    assert _tunnel(engine, auth, "evil.example.com")[1] == checks.Denied(checks.NOT_ALLOWED)
    assert _tunnel(engine, auth, "10.0.0.1")[1] == checks.Denied(checks.IP_LITERAL)


def test_engine_denial_is_written_before_it_is_answered(engine: Engine) -> None:
    auth = _issue("s1")
    _tunnel(engine, auth, "evil.example.com")
    counters = _item("s1", n.EGRESS_COUNTERS_ITEM)
    assert counters["denied"] == 1
    assert counters["denied_hosts"] == {"1": {"host": "evil.example.com", "seq": 1}}
    query = aws.client("dynamodb").query(
        TableName=f"{n.PROJECT}-{STAGE}-{n.EGRESS.logical}",
        KeyConditionExpression="session_id = :s AND begins_with(#i, :c)",
        ExpressionAttributeNames={"#i": "item"},
        ExpressionAttributeValues={":s": {"S": "s1"}, ":c": {"S": n.EGRESS_CONNECTION_PREFIX}},
    )
    assert [(i["host"]["S"], i["decision"]["S"], i["reason"]["S"]) for i in query["Items"]] == [
        ("evil.example.com", "denied", "not_allowed")
    ]


def test_engine_keeps_only_the_last_denied_hosts_and_counts_a_flood_in_the_flush(engine: Engine) -> None:
    auth = _issue("s1")
    state, _ = _tunnel(engine, auth, "api.example.com")
    now = [1_000_000.0]
    engine.clock = lambda: now[0]

    async def flood() -> None:
        for i in range(n.EGRESS_DENIED_HOSTS_KEPT + 10):
            now[0] = 1_000_000.0 + i // 25  # 20 written per second, the rest counted in the flush
            await engine.counters.deny(
                state, state.credential, f"h{i}.example.com", 443, checks.Denied(checks.NOT_ALLOWED)
            )  # type: ignore[arg-type]

    asyncio.run(flood())
    counters = _item("s1", n.EGRESS_COUNTERS_ITEM)
    assert counters["denied"] == n.EGRESS_DENIED_HOSTS_KEPT + 5  # five of the first second wait for the flush
    assert len(counters["denied_hosts"]) == n.EGRESS_DENIED_HOSTS_KEPT
    asyncio.run(engine.counters.flush([state]))
    assert _item("s1", n.EGRESS_COUNTERS_ITEM)["denied"] == n.EGRESS_DENIED_HOSTS_KEPT + 10


def test_engine_credential_request_gets_the_header_and_a_scrubber(engine: Engine) -> None:
    state, denied = _tunnel(engine, _issue("s1"), "api.example.com")
    assert denied is None
    answer = asyncio.run(engine.admit_request(state, _request("api.example.com", "/v1")))
    assert answer.denied is None
    assert answer.set_headers == {"Authorization": "Bearer crm-value-123"}
    assert answer.scrubber is not None and answer.scrubber.bytes(b"x crm-value-123 y")[1] == 1


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"host_header": "b.example.org"}, checks.HOST_MISMATCH),
        ({"sni": "b.example.org"}, checks.SNI_MISMATCH),
        ({"host_header": "api.example.com@evil.example.com"}, checks.USERINFO),
        ({"upgrade": "h2c"}, checks.UPGRADE_NOT_ALLOWED),
        ({"upgrade": "websocket"}, checks.WEBSOCKET_WITH_CREDENTIAL),
        ({"head_bytes": checks.MAX_HEAD_BYTES + 1}, checks.HEADERS_TOO_LARGE),
        ({"http_version": "HTTP/0.9"}, checks.BAD_REQUEST),
    ],
)
def test_engine_refuses_a_request_that_does_not_match_its_tunnel(
    engine: Engine, changes: dict[str, Any], reason: str
) -> None:
    state, _ = _tunnel(engine, _issue("s1"), "api.example.com")
    answer = asyncio.run(engine.admit_request(state, _request("api.example.com", **changes)))
    assert answer.denied is not None and answer.denied.reason == reason


def test_engine_never_adds_a_credential_over_plain_http(engine: Engine) -> None:
    _issue("s1")
    state = ClientState(peer="127.77.0.1", opened=time.time())
    auth = "Basic " + base64.b64encode(f"s1:{SECRET}".encode()).decode()
    _put_policy(
        "acme",
        {
            "allow": [
                {
                    "host": "api.example.com",
                    "ports": [8080],
                    "credential": {"header": "X-K", "template": "{secret:crm}"},
                }
            ]
        },
    )
    view = _request(
        "api.example.com",
        scheme="http",
        port=8080,
        host_header="api.example.com:8080",
        proxy_authorization=auth,
        sni=None,
    )
    answer = asyncio.run(engine.admit_request(state, view))
    assert answer.denied is not None and answer.denied.reason == checks.CREDENTIAL_OVER_HTTP


def test_engine_index_requests_follow_the_policys_packages(engine: Engine) -> None:
    state, denied = _tunnel(engine, _issue("s1"), INDEX.host)
    assert denied is None
    page = asyncio.run(engine.admit_request(state, _request(INDEX.host, "/simple/sandbox-hello/")))
    assert (
        page.denied is None and page.pinned_version == "1.0.0" and page.set_headers["Accept"] == "text/html"
    )
    unlisted = asyncio.run(engine.admit_request(state, _request(INDEX.host, "/simple/other/")))
    assert unlisted.denied == checks.Denied(checks.PACKAGE_NOT_LISTED, 404)


@pytest.mark.parametrize(
    ("breaker", "reason"),
    [
        ("none", checks.EGRESS_CLOSED),
        ("cap", checks.CAP_ZERO),
        ("disabled", checks.TENANT_DISABLED),
        ("malformed", checks.POLICY_UNAVAILABLE),
    ],
)
def test_engine_breakers_close_the_scope(engine: Engine, breaker: str, reason: str) -> None:
    auth = _issue("s1")
    if breaker == "none":
        _put_policy("acme", {"egress": "none"})
    elif breaker == "cap":
        aws.client("ssm").put_parameter(
            Name=dimensions.AGENT_HOURLY.parameter(STAGE, "acme"), Value="0", Type="String"
        )
    elif breaker == "disabled":
        aws.client("dynamodb").put_item(
            TableName=f"{n.PROJECT}-{STAGE}-{n.TENANTS.logical}",
            Item={**n.TENANTS.key("acme", n.TENANT_POLICY_ITEM), "sandbox_enabled": {"BOOL": False}},
        )
    else:
        _put_policy("acme", '{"allow": ["*"]}')
    assert _tunnel(engine, auth, "api.example.com")[1].reason == reason  # type: ignore[union-attr]
    # and another tenant's scope is untouched
    assert _tunnel(engine, _issue("s2", "globex"), "api.example.com")[1] is None


def test_engine_credential_of_a_non_allowlist_environment_admits_nothing(engine: Engine) -> None:
    auth = _issue("s1", environment="default-public")
    assert _tunnel(engine, auth, "api.example.com")[1] == checks.Denied(checks.EGRESS_CLOSED)


def test_engine_policy_lookup_is_one_store_read_then_cached(engine: Engine) -> None:
    auth = _issue("s1")
    for _ in range(5):
        assert _tunnel(engine, auth, "api.example.com")[1] is None
    assert engine.policies.loads == 1


def test_engine_resolution_refuses_non_public_answers_and_follows_routes(engine: Engine) -> None:
    state, _ = _tunnel(engine, _issue("s1"), "meta.example.net")
    refused = asyncio.run(engine.resolve(state, "meta.example.net", 443))
    assert isinstance(refused, checks.Denied) and refused.reason == checks.NON_PUBLIC_ADDRESS
    assert _item("s1", n.EGRESS_COUNTERS_ITEM)["denied"] == 1
    assert asyncio.run(engine.resolve(state, "routed.example.org", 443)) == ("127.0.0.1", 9443)
    assert asyncio.run(engine.resolve(state, "pub.example.org", 443)) == ("93.184.216.34", 443)


def test_engine_bytes_are_flushed_and_the_daily_cap_refuses_new_connections(engine: Engine) -> None:
    auth = _issue("s1")
    state, _ = _tunnel(engine, auth, "api.example.com")
    answer = asyncio.run(engine.admit_request(state, _request("api.example.com")))
    engine.counters.add_bytes(state, answer.conn, out=600, into=1_000)
    asyncio.run(engine.counters.flush([state]))
    counters = _item("s1", n.EGRESS_COUNTERS_ITEM)
    assert (counters["allowed"], counters["bytes_out"], counters["bytes_in"]) == (1, 600, 1_000)
    dim = dimensions.EGRESS_DAILY_BYTES
    key = dim.counter_key({"tenant_id": "acme"}, Windows.at(utc_now()))
    stored = aws.client("dynamodb").get_item(
        TableName=f"{n.PROJECT}-{STAGE}-{n.TENANT_DAILY_COUNTERS.logical}", Key={"counter_key": {"S": key}}
    )["Item"]
    assert stored[n.COUNTER_ATTR_BYTES]["N"] == "1600"
    # Given a cap below what was counted (per-tenant override)
    aws.client("ssm").put_parameter(Name=dim.parameter(STAGE, "acme"), Value="1000", Type="String")
    engine.byte_caps.drop("acme")
    engine.store.byte_caps._cache.clear()
    # Then a new connection is refused and the session's counters name the dimension
    assert _tunnel(engine, auth, "api.example.com")[1] == checks.Denied(checks.CAP_EXCEEDED, 403, dim.name)
    assert _item("s1", n.EGRESS_COUNTERS_ITEM)["cap_refused"]["dimension"] == dim.name


WHEEL_PATH = "/simple/sandbox-hello/1.0.0/sandbox_hello-1.0.0-py3-none-any.whl"


def test_engine_adds_the_codeartifact_token_to_index_requests(engine: Engine) -> None:
    # Given a stage whose index is a CodeArtifact repository (the token call pinned to botocore's
    # model of GetAuthorizationToken: its parameters are validated, its answer as documented)
    from datetime import UTC, datetime, timedelta

    from botocore.stub import Stubber
    from egress_proxy.config import IndexSettings

    engine.config = ProxyConfig(
        **{
            **engine.config.__dict__,
            "index": IndexSettings(INDEX.host, "/simple/", ("thinkwork-prod", "123456789012")),
        }
    )  # type: ignore[arg-type]
    engine.store.codeartifact = ("thinkwork-prod", "123456789012")
    client = aws.new_client("codeartifact", region_name="us-east-1")
    engine.store._clients["codeartifact"] = client
    with Stubber(client) as stub:
        stub.add_response(
            "get_authorization_token",
            {
                "authorizationToken": "ca-token-value-123",
                "expiration": datetime.now(UTC) + timedelta(hours=1),
            },
            {"domain": "thinkwork-prod", "domainOwner": "123456789012", "durationSeconds": 3600},
        )
        state, _ = _tunnel(engine, _issue("s1"), INDEX.host)
        first = asyncio.run(engine.admit_request(state, _request(INDEX.host, "/simple/sandbox-hello/")))
        second = asyncio.run(engine.admit_request(state, _request(INDEX.host, "/simple/sandbox-hello/")))
        wheel = asyncio.run(engine.admit_request(state, _request(INDEX.host, WHEEL_PATH)))
    # Then each index request carries it as pip's Basic credential (one token call, cached), and
    # an answer that echoes it is scrubbed
    assert first.denied is None, first.denied
    expected = "Basic " + base64.b64encode(b"aws:ca-token-value-123").decode()
    assert first.set_headers["Authorization"] == second.set_headers["Authorization"] == expected
    assert first.scrubber is not None and first.scrubber.bytes(b"ca-token-value-123")[1] == 1
    # And a package file carries the token too but is streamed, not buffered to be scrubbed (a
    # stored package cannot hold a token made after it; buffered, a wheel over the bound would fail)
    assert wheel.denied is None and wheel.set_headers["Authorization"] == expected
    assert wheel.scrubber is None
