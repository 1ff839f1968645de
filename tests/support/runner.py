"""The one builder of the session-runner test double: tenant acme's `SessionRunner` with the
stage defaults (900 s sessions, the output caps), any field overridden by keyword.

Dispatch is imported when a runner is built, not when this module is: tests set the endpoints
and credentials dispatch reads before the first runner exists.
"""

from __future__ import annotations

import ast
import base64
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from infra.local.interpreter import LocalInterpreterServer

if TYPE_CHECKING:
    from sandbox_runtime.runner import SessionRunner

ACME_INTERPRETER = "sbx_test_acme_pub"
ACME_INTERPRETER_ARN = (
    f"arn:aws:bedrock-agentcore:us-east-1:123456789012:code-interpreter-custom/{ACME_INTERPRETER}"
)
ACME_RUNNER_ROLE = "arn:aws:iam::123456789012:role/thinkwork-test-sbx-runner"


def cell_arguments(source: str) -> tuple[str, str, float]:
    """What the driver of a Python call (`sandbox_runtime.runner.cells`) carries: the runtime's
    source, the user code (decoded) and the inner deadline."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_sbx_cell":
            runtime, code, deadline = (ast.literal_eval(arg) for arg in node.args[:3])
            return runtime, base64.b64decode(code).decode("utf-8"), float(deadline)
    raise AssertionError("not a Python call's driver")


def session_runner(**overrides: Any) -> SessionRunner:
    from sandbox_runtime.runner import SessionRunner

    params: dict[str, Any] = {
        "tenant_id": "acme",
        "allowed_interpreter_ids": [ACME_INTERPRETER],
        "allowed_interpreter_arns": [ACME_INTERPRETER_ARN],
        "runner_role_arn": ACME_RUNNER_ROLE,
        "session_timeout_seconds": 900,
        "call_timeout_seconds": 120,
        "stdout_cap_bytes": 262_144,
        "stderr_cap_bytes": 32_768,
    }
    params.update(overrides)
    return SessionRunner(**params)


@pytest.fixture(scope="module")
def acme_interpreter() -> Iterator[LocalInterpreterServer]:
    """A local interpreter serving acme's PUBLIC interpreter (ACME_INTERPRETER), for one module."""
    server = LocalInterpreterServer(interpreters={ACME_INTERPRETER: "PUBLIC"}).start()
    try:
        yield server
    finally:
        server.stop()
