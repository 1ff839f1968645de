"""The lines of dispatch (dispatch.line): stages nested outermost first, each giving back what it
holds as the line unwinds, whatever the stages inside did; and the order docs/dispatch.md states."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dispatch import line

DOC = Path(__file__).resolve().parents[3] / "docs" / "dispatch.md"


def _holding(name: str, seen: list[str]) -> Callable[..., Any]:
    def stage(call: Any, then: Callable[[Any], Any]) -> Any:
        seen.append(f"take {name}")
        try:
            return then(call)
        finally:
            seen.append(f"give back {name}")

    return stage


def test_nest_runs_the_stages_outermost_first_and_unwinds_innermost_first() -> None:
    # Given three stages around an innermost one
    seen: list[str] = []
    run = line.nest([_holding(n, seen) for n in ("a", "b", "c")], lambda call: seen.append("run") or "done")
    # When the line runs / Then each stage took before the next and gave back after it
    assert run(object()) == "done"
    assert seen == ["take a", "take b", "take c", "run", "give back c", "give back b", "give back a"]


def test_nest_gives_everything_back_when_the_innermost_stage_fails() -> None:
    # Given a line whose innermost stage raises
    seen: list[str] = []

    def failing(call: Any) -> Any:
        raise RuntimeError("boom")

    run = line.nest([_holding(n, seen) for n in ("a", "b")], failing)
    # When it runs / Then the failure passes out and every stage gave its resource back
    with pytest.raises(RuntimeError, match="boom"):
        run(object())
    assert seen == ["take a", "take b", "give back b", "give back a"]


def _stages(built: Callable[..., Any]) -> list[str]:
    """The stages of a built line, outermost first, as `package.module.function` under dispatch."""
    names = []
    step: Any = built
    while isinstance(step, functools.partial):
        names.append(f"{step.func.__module__.removeprefix('dispatch.')}.{step.func.__name__}")
        step = step.keywords["then"]
    names.append(f"{step.__module__.removeprefix('dispatch.')}.{step.__name__}")
    return names


def _documented(name: str) -> list[str]:
    row = next(r for r in DOC.read_text(encoding="utf-8").splitlines() if r.startswith(f"| `{name}`"))
    return re.findall(r"`([a-z_]+\.stage\.[a-z_]+)`", row.split("|")[2])


@pytest.mark.parametrize(
    ("name", "built"),
    [("EXECUTE_CODE", line.EXECUTE_CODE), ("SUBMIT", line.submit()), ("PAUSED_END", line.PAUSED_END)],
)
def test_lines_are_the_order_docs_dispatch_md_states(name: str, built: Callable[..., Any]) -> None:
    # Given a built line and its row in docs/dispatch.md / Then they name the same stages in order
    assert _stages(built) == _documented(name)
    assert _stages(built)[0].startswith("idempotency.stage.")  # the outermost writes the row
