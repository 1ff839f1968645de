"""The Lambda layer's pins and the project's pins never drift apart."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _pins(lines: list[str]) -> dict[str, str]:
    pins = {}
    for line in lines:
        m = re.match(r"^\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^\s;#]+)", line)
        if m:
            pins[m.group(1).lower()] = m.group(3)
    return pins


def test_deps_requirements_pins_match_pyproject() -> None:
    # Given the layer requirements and the project dependencies
    layer = _pins((REPO / "layers/deps/requirements.txt").read_text().splitlines())
    project = _pins(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])
    # Then every layer dependency is pinned, to the version the tests run with
    assert set(layer) == {"aws-lambda-powertools", "pydantic", "boto3", "botocore"}
    assert {k: project[k] for k in layer} == layer


def test_deps_requirements_keep_the_layer_lean() -> None:
    # Given the layer requirements / Then no extras (the tracer extra drags a second botocore in)
    text = (REPO / "layers/deps/requirements.txt").read_text()
    assert "[" not in "".join(line for line in text.splitlines() if not line.startswith("#"))
