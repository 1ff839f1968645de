"""Property-test sizes follow --reliability-full (tests/support/sizes.py)."""

from __future__ import annotations

import pytest

from tests.support import sizes


def test_examples_quick_unless_reliability_full(reliability_full: bool) -> None:
    # Given the option this run was started with / When a property asks for its size
    # Then it gets the full size exactly under --reliability-full
    assert sizes.FULL is reliability_full
    assert sizes.examples(quick=150, full=600) == (600 if reliability_full else 150)


def test_examples_full_flag_switches_the_size(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given / When the full flag is set, then cleared / Then the size follows it
    monkeypatch.setattr(sizes, "FULL", True)
    assert sizes.examples(quick=1, full=9) == 9
    monkeypatch.setattr(sizes, "FULL", False)
    assert sizes.examples(quick=1, full=9) == 1
