"""The proxy's TTL caches: a burst of misses costs one load, a failure is not cached."""

from __future__ import annotations

import asyncio
import threading

import pytest
from egress_proxy.caches import AsyncTtlCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_cache_loads_once_for_concurrent_misses_and_reuses_within_the_ttl() -> None:
    clock = Clock()
    cache: AsyncTtlCache[int] = AsyncTtlCache(10, clock=clock)
    calls = 0
    release = threading.Event()

    def load() -> int:
        nonlocal calls
        calls += 1
        release.wait(5)
        return 7

    async def scenario() -> list[int]:
        tasks = [asyncio.ensure_future(cache.get("k", load)) for _ in range(20)]
        await asyncio.sleep(0.05)
        release.set()
        return list(await asyncio.gather(*tasks))

    assert asyncio.run(scenario()) == [7] * 20
    assert calls == 1 and cache.loads == 1
    clock.now += 9
    assert asyncio.run(cache.get("k", load)) == 7 and calls == 1
    clock.now += 2  # expired: loaded again
    assert asyncio.run(cache.get("k", load)) == 7 and calls == 2


def test_cache_does_not_keep_a_failed_load() -> None:
    cache: AsyncTtlCache[int] = AsyncTtlCache(10)

    def fail() -> int:
        raise RuntimeError("store down")

    with pytest.raises(RuntimeError):
        asyncio.run(cache.get("k", fail))
    assert asyncio.run(cache.get("k", lambda: 3)) == 3


def test_cache_is_bounded() -> None:
    cache: AsyncTtlCache[int] = AsyncTtlCache(10, max_items=3)
    for i in range(10):
        cache.put(i, i)
    assert [cache.peek(i) for i in range(10)] == [None] * 7 + [7, 8, 9]
