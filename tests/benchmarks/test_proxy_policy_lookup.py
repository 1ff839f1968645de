"""Benchmark `proxy_policy_lookup`: the egress proxy's decision for a request on an open tunnel
(its credential re-checked, the breakers and the tenant × environment policy applied, the
credential header rendered) when everything it reads is cached, and what a cache miss costs.
Targets: a cached decision p50 ≤ 1 ms; a miss costs at most one store read per source (the policy:
one SSM GetParameter).

The engine runs in-process on an asyncio loop against moto, as the proxy's addon calls it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import statistics
import time

import pytest
from egress_proxy.config import ProxyConfig
from egress_proxy.engine import Engine
from egress_proxy.model import ClientState, RequestView
from egress_proxy.store import EgressStore
from sandbox_common import aws, dimensions
from sandbox_common import naming as n

from tests.benchmarks._report import emit
from tests.support.tables import STAGE, tables  # noqa: F401 - fixture

pytestmark = pytest.mark.bench

SECRET = "bench-secret"
HOST = "api.example.com"


def _setup(tables: dict[str, str]) -> Engine:  # noqa: F811 - the fixture's value
    ssm = aws.client("ssm")
    for d in dimensions.dimensions():
        ssm.put_parameter(Name=d.parameter(STAGE), Value=str(d.default), Type="String")
    policy = {
        "allow": [
            {"host": HOST, "credential": {"header": "Authorization", "template": "Bearer {secret:crm}"}},
            *({"host": f"h{i}.example.org"} for i in range(50)),
        ],
        "packages": [f"pkg{i}" for i in range(50)],
    }
    ssm.put_parameter(
        Name=n.egress_policy_parameter(STAGE, "acme", "default-allowlist"),
        Value=json.dumps(policy),
        Type="String",
    )
    aws.client("secretsmanager").create_secret(
        Name=n.tenant_secret_name(STAGE, "acme", "crm"), SecretString="v" * 40
    )
    aws.client("dynamodb").put_item(
        TableName=tables[n.TENANTS.logical],
        Item={**n.TENANTS.key("acme", n.TENANT_POLICY_ITEM), "sandbox_enabled": {"BOOL": True}},
    )
    aws.client("dynamodb").put_item(
        TableName=tables[n.EGRESS.logical],
        Item={
            **n.EGRESS.key("s1", n.EGRESS_CREDENTIAL_ITEM),
            "tenant_id": {"S": "acme"},
            "environment": {"S": "default-allowlist"},
            "secret_sha256": {"S": hashlib.sha256(SECRET.encode()).hexdigest()},
            "expires_at": {"N": str(int(time.time()) + 3600)},
            "source": {"S": "127.0.0.1"},
        },
    )
    config = ProxyConfig(
        stage=STAGE,
        egress_table=tables[n.EGRESS.logical],
        counters_table=tables[n.TENANT_DAILY_COUNTERS.logical],
        tenants_table=tables[n.TENANTS.logical],
    )
    store = EgressStore(
        stage=STAGE,
        egress_table=config.egress_table,
        counters_table=config.counters_table,
        tenants_table=config.tenants_table,
        cache_seconds=config.cache_seconds,
    )
    return Engine(config, store)


def test_proxy_policy_lookup(tables: dict[str, str], bench_full: bool) -> None:  # noqa: F811
    engine = _setup(tables)
    decisions = 2000 if bench_full else 200
    auth = "Basic " + base64.b64encode(f"s1:{SECRET}".encode()).decode()
    request = RequestView("GET", "https", HOST, 443, "/v1", HOST, "", None, None, 200, HOST)
    reads: list[str] = []
    ssm = engine.store.client("ssm")
    ssm.meta.events.register(
        "before-parameter-build.ssm.GetParameter", lambda params, **kw: reads.append(params["Name"])
    )

    async def run() -> tuple[list[float], int]:
        state = ClientState(peer="127.0.0.1", opened=time.time())
        assert await engine.open_tunnel(state, HOST, 443, auth) is None  # the misses: each read once
        misses = len([r for r in reads if "/egress/" in r])
        samples = []
        for _ in range(decisions):
            start = time.perf_counter()
            answer = await engine.admit_request(state, request)
            samples.append(time.perf_counter() - start)
            assert answer.denied is None and answer.set_headers["Authorization"] == "Bearer " + "v" * 40
        return samples, misses

    samples, misses = asyncio.run(run())
    p50 = statistics.median(samples) * 1000
    p99 = sorted(samples)[int(len(samples) * 0.99) - 1] * 1000
    policy_reads = len([r for r in reads if "/egress/" in r])
    emit(
        "proxy_policy_lookup",
        target="cached p50 <= 1 ms; a miss <= one store read",
        ratio=p50 / 1.0,
        p50_ms=round(p50, 4),
        p99_ms=round(p99, 4),
        decisions=decisions,
        policy_reads_on_miss=misses,
        policy_reads_after=policy_reads,
    )
    # A miss is one read of the policy, and the cached decisions read it no more
    assert misses == 1 and policy_reads == 1
    if bench_full:
        assert p50 <= 1.0
