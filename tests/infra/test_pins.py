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


def test_session_runtime_pins_the_projects_aws_sdk() -> None:
    # Given the local session runtime's pins (its boto3 copies s3_uri inputs, as on AgentCore)
    session = _pins((REPO / "infra/local/interpreter/session-requirements.txt").read_text().splitlines())
    project = _pins((REPO / "constraints.txt").read_text().splitlines())
    sdk = ("boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "urllib3", "six")
    # Then the SDK and its dependencies are there, at the versions the project itself runs
    assert {k: session.get(k) for k in sdk} == {k: project[k] for k in sdk}


def test_egress_setup_layer_pins_the_projects_cryptography() -> None:
    # Given the egress setup layer's pins (it makes the proxy CA with cryptography)
    layer = _pins((REPO / "layers/egress_setup/requirements.txt").read_text().splitlines())
    project = _pins((REPO / "constraints.txt").read_text().splitlines())
    # Then it pins cryptography and its dependencies, at the versions the tests make the CA with
    assert set(layer) == {"cryptography", "cffi", "pycparser"}
    assert {k: project[k] for k in layer} == layer


def test_egress_proxy_pins_mitmproxy_as_the_project_does() -> None:
    # Given the egress proxy's requirements (its venv, its image) and the project's constraints
    egress = _pins((REPO / "functions/egress_proxy/requirements.txt").read_text().splitlines())
    project = _pins((REPO / "constraints.txt").read_text().splitlines())
    # Then the engine is pinned once, to one version, and the shared AWS SDK pins agree
    assert egress["mitmproxy"] == project["mitmproxy"]
    assert {k: egress[k] for k in ("boto3", "botocore", "aws_lambda_powertools", "pydantic")} == {
        "boto3": project["boto3"],
        "botocore": project["botocore"],
        "aws_lambda_powertools": project["aws_lambda_powertools"],
        "pydantic": project["pydantic"],
    }
    # And every line is an exact pin (installed with --no-deps)
    lines = [
        line
        for line in (REPO / "functions/egress_proxy/requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert all(re.match(r"^[A-Za-z0-9_.-]+==\S+$", line) for line in lines)
