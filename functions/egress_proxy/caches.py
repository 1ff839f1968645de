"""TTL caches for the proxy's event loop: a hit is a dict lookup; a miss runs the (blocking) load in
a worker thread, once per key at a time (callers that miss together await the same load), so a
burst of requests costs one store read and the loop never blocks on I/O.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class AsyncTtlCache(Generic[V]):
    def __init__(
        self,
        ttl_seconds: float,
        *,
        max_items: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl_seconds
        self.max_items = max_items
        self.clock = clock
        self._items: OrderedDict[Hashable, tuple[float, V]] = OrderedDict()
        self._loading: dict[Hashable, asyncio.Future[V]] = {}
        self.loads = 0  # how many loads ran (the benchmark's "a miss costs one read")

    def peek(self, key: Hashable) -> V | None:
        """The fresh cached value, or None: never loads."""
        hit = self._items.get(key)
        if hit is not None and hit[0] > self.clock():
            return hit[1]
        return None

    def fresh(self, key: Hashable) -> bool:
        hit = self._items.get(key)
        return hit is not None and hit[0] > self.clock()

    async def get(self, key: Hashable, load: Callable[[], V]) -> V:
        hit = self._items.get(key)
        if hit is not None and hit[0] > self.clock():
            return hit[1]
        pending = self._loading.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._load(key, load))
            self._loading[key] = pending
            pending.add_done_callback(lambda _f: self._loading.pop(key, None))
        return await asyncio.shield(pending)

    async def _load(self, key: Hashable, load: Callable[[], V]) -> V:
        self.loads += 1
        value = await asyncio.to_thread(load)  # a failing load raises and caches nothing
        self.put(key, value)
        return value

    def put(self, key: Hashable, value: V) -> None:
        self._items[key] = (self.clock() + self.ttl, value)
        self._items.move_to_end(key)
        while len(self._items) > self.max_items:
            self._items.popitem(last=False)

    def drop(self, key: Hashable) -> None:
        self._items.pop(key, None)

    def drop_where(self, predicate: Callable[[Hashable], bool]) -> None:
        for key in [k for k in self._items if predicate(k)]:
            del self._items[key]
