"""Requests that do not depend on each other go out together (issue 9: the critical path).

One small pool per container, shared by every call site, so no module starts ad-hoc threads:
- `start(fn, *args)` sends one request ahead and returns its Future (join it with `.result()`);
- `concurrently(*thunks)` runs a few thunks side by side and returns their results in order,
  after ALL of them finished (a failure of one never leaves another one running behind the
  caller's back); the first failure, in argument order, is raised;
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


def concurrently(*thunks: Callable[[], Any]) -> list[Any]:
    """Run every thunk, the first one in this thread and the rest on the pool; return their
    results in order once all have finished, or raise the first failure in argument order."""
    if not thunks:
        return []
    futures = [start(thunk) for thunk in thunks[1:]]
    results: list[Any] = []
    first_error: BaseException | None = None
    try:
        results.append(thunks[0]())
    except BaseException as exc:  # noqa: BLE001 — re-raised below, after the others finished
        first_error = exc
        results.append(None)
    for future in futures:
        try:
            results.append(future.result())
        except BaseException as exc:  # noqa: BLE001 — re-raised below (the first one wins)
            first_error = first_error or exc
            results.append(None)
    if first_error is not None:
        raise first_error
    return results


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
