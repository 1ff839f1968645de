"""dispatch.parallel: independent requests go out together, results and failures stay in order."""

from __future__ import annotations

import time

from dispatch import parallel


def test_start_returns_a_future_holding_the_result_or_the_exception() -> None:
    # Given one call that answers and one that raises
    ok, bad = parallel.start(lambda a, b: a + b, 2, 3), parallel.start(int, "x")
    # When joined / Then the value, resp. the exception, comes back
    assert ok.result(timeout=5) == 5
    assert isinstance(bad.exception(timeout=5), ValueError)


def test_pending_join_waits_for_every_write_and_returns_failures_as_values() -> None:
    # Given two writes in flight, one slow and one failing
    pending = parallel.Pending()
    landed: list[str] = []

    def slow_write(row: str) -> str:
        time.sleep(0.2)
        landed.append(row)
        return "written"

    def broken_write(row: str) -> str:
        raise RuntimeError(row)

    pending.add(slow_write, "row-1")
    pending.add(broken_write, "row-2")
    # When joined
    out = pending.join()
    # Then both finished before join returned; the failure is a value, not raised
    assert landed == ["row-1"]
    assert out[0] == "written"
    assert isinstance(out[1], RuntimeError)
    # And a second join has nothing left to wait for
    assert pending.join() == []
