"""Benchmark output: one JSON object per benchmark on stdout."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any


def emit(name: str, *, target: str, ratio: float | None = None, **figures: Any) -> dict[str, Any]:
    record = {"name": name, **figures, "ratio": None if ratio is None else round(ratio, 4), "target": target}
    print(json.dumps(record), flush=True)
    return record


def median_seconds(fn: Callable[[], Any], *, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def best_seconds(fn: Callable[[], Any], *, repeat: int) -> float:
    """Fastest of `repeat` runs: the least disturbed by other work on a shared machine."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best
