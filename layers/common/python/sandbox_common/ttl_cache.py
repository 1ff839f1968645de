"""A tiny TTL cache for per-container reads (pre-flight decisions, prices, budgets). Bounded so a
flood of distinct hostile keys cannot grow memory without limit."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class TtlCache(Generic[V]):
    def __init__(
        self, ttl_seconds: float, *, max_items: int = 1024, clock: Callable[[], float] = time.monotonic
    ):
        self.ttl = ttl_seconds
        self.max_items = max_items
        self.clock = clock
        self._items: OrderedDict[Hashable, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_load(self, key: Hashable, load: Callable[[], V]) -> V:
        now = self.clock()
        with self._lock:
            hit = self._items.get(key)
            if hit is not None and hit[0] > now:
                return hit[1]
        value = load()  # a failing load raises and caches nothing
        with self._lock:
            self._items[key] = (now + self.ttl, value)
            self._items.move_to_end(key)
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)
        return value

    def peek(self, key: Hashable) -> V | None:
        """The cached, unexpired value, or None: never loads (no request)."""
        with self._lock:
            hit = self._items.get(key)
        return hit[1] if hit is not None and hit[0] > self.clock() else None

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def drop(self, which: Callable[[Hashable], bool]) -> None:
        """Forget every entry whose key `which` picks."""
        with self._lock:
            for key in [k for k in self._items if which(k)]:
                del self._items[key]
