"""Exact under concurrency: with cap C and N > C concurrent callers, exactly C pass."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sandbox_common import dimensions, naming


@pytest.mark.parametrize(
    ("dimension", "cap", "callers"),
    [(dimensions.TENANT_DAILY.name, 5, 12), (dimensions.AGENT_HOURLY.name, 3, 10)],
)
def test_concurrency_exactly_cap_callers_admitted(quota, monkeypatch, freeze, dimension, cap, callers):
    """Threads call the handler in-process against a moto server over real HTTP.

    The shared moto server applies one request at a time (infra/local/moto_serial.py), so this does not prove
    DynamoDB's isolation; it proves our part under racing callers: the conditional transaction
    is the only gate (no read-then-write in our code), a refused call increments nothing, and
    no caller double-counts.
    """
    # Given a cap C, a window shared by every caller, and clients on the serial server
    freeze("2026-11-21T08:15:00Z")
    quota.set_cap(dimension, cap)
    quota.call(tenant="warmup")  # build clients and caches before the race (a warm container)
    barrier = threading.Barrier(callers)

    def one_call(_: int) -> dict:
        barrier.wait()
        return quota.call(tenant="acme", agent="agent-7")

    # When N > C callers race
    with ThreadPoolExecutor(max_workers=callers) as pool:
        results = list(pool.map(one_call, range(callers)))

    # Then exactly C are admitted with distinct counts 1..C, the rest are refused on that
    # dimension, and the stored counts equal C
    admitted = [r for r in results if r["ok"]]
    refused = [r for r in results if not r["ok"]]
    assert len(admitted) == cap
    assert {r["dimension"] for r in refused} == {dimension}
    key = "tenant_daily_count" if dimension == dimensions.TENANT_DAILY.name else "agent_hourly_count"
    assert all(1 <= r[key] <= cap for r in admitted)
    assert quota.count(naming.TENANT_DAILY_COUNTERS, "acme#2026-11-21") == cap
    assert quota.count(naming.AGENT_HOURLY_COUNTERS, "acme#agent-7#2026-11-21T08") == cap
