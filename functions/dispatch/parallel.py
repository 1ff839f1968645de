"""Requests that do not depend on each other go out together (the critical path stays short).

One small pool per process, shared by every call site (`Parts.pool`), so no module starts ad-hoc
threads: a call sends ahead on it what goes out beside its idempotency claim (`dispatch.call`),
a new cold session its activation writes beside the user code (`dispatch.sessions.activation`),
an allowlist session its end reading beside the artifact helper. The audit row is not sent beside
the idempotency completion: it is inside it, one transaction (`dispatch.idempotency.store`).

botocore clients are thread-safe; each request still runs exactly once (nothing here retries).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import cache

# A handful of requests per call at most; the local stack runs several calls per process at once.
MAX_WORKERS = 16


@cache
def pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="dispatch-parallel")
