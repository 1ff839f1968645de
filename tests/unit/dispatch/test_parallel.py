"""dispatch.parallel: independent requests go out together, results and failures stay in order."""

from __future__ import annotations

from dispatch import parallel


def test_pool_returns_a_future_holding_the_result_or_the_exception() -> None:
    # Given one call that answers and one that raises, sent on the one pool
    ok, bad = parallel.pool().submit(lambda a, b: a + b, 2, 3), parallel.pool().submit(int, "x")
    # When joined / Then the value, resp. the exception, comes back; the pool is the process's one
    assert ok.result(timeout=5) == 5
    assert isinstance(bad.exception(timeout=5), ValueError)
    assert parallel.pool() is parallel.pool()
