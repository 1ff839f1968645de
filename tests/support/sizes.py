"""How big a property test runs: a representative size in `make test`, the exhaustive one under
`--reliability-full` (`make reliability`). Set once per process by tests/conftest.py's
pytest_configure, before any test module is imported, so it can size `@settings(...)` decorators."""

from __future__ import annotations

FULL = False


def examples(*, quick: int, full: int) -> int:
    """Hypothesis examples for one property: `full` under --reliability-full, else `quick`."""
    return full if FULL else quick
