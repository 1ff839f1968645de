"""Requests that do not depend on each other go out together (issue 9: the critical path).

One small pool per container, shared by every call site, so no module starts ad-hoc threads.
Each pair that goes out together has one side running inside Powertools idempotency (its claim
`PutItem`, its completion `UpdateItem`), so the other side is sent ahead and joined after:
- `start(fn, *args)` sends one request ahead and returns its Future (join it with `.result()`);
- `Pending` collects writes that must land before the call answers but need not hold up the
  steps in between (the audit row beside the idempotency completion): `join()` waits for all.

botocore clients are thread-safe; each request still runs exactly once (nothing here retries).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")

# A handful of requests per call at most; the local stack runs several calls per process at once.
_MAX_WORKERS = 16


@cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=_MAX_WORKERS, thread_name_prefix="dispatch-parallel")


def start(fn: Callable[..., T], *args: Any) -> Future[T]:
    """`fn(*args)` on the pool; its result (or exception) waits in the Future."""
    return _pool().submit(fn, *args)


class Pending:
    """Writes in flight that the call must see land before it answers (`join`)."""

    def __init__(self) -> None:
        self._futures: list[Future[Any]] = []
        self._lock = threading.Lock()

    def add(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future = start(fn, *args)
        with self._lock:
            self._futures.append(future)
        return future

    def join(self) -> list[Any]:
        """Wait for every write added so far; their results in order. A write's own failure is
        its own business (the audit writer dead-letters): it is returned, never raised here."""
        with self._lock:
            futures, self._futures = self._futures, []
        out: list[Any] = []
        for future in futures:
            try:
                out.append(future.result())
            except Exception as exc:  # noqa: BLE001 — reported to the caller as a value
                out.append(exc)
        return out
