"""Requests that do not depend on each other go out together (the critical path stays short).

One small pool per container, shared by every call site, so no module starts ad-hoc threads.
Each pair that goes out together has one side running inside Powertools idempotency (its claim
`PutItem`), so the other side is sent ahead and joined after: `start(fn, *args)` sends one request
ahead and returns its Future (join it with `.result()`). The audit row is not sent beside the
idempotency completion: it is inside it, one transaction (`idempotency.CompletionRows`).

botocore clients are thread-safe; each request still runs exactly once (nothing here retries).
"""

from __future__ import annotations

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
