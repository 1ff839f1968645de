"""Programmatic tool calling against the REAL local interpreter (shared by tests/integration/tools
and the ptc_loop benchmark): a session process that really
parks a thread on a tool call between two executeCode calls (no double of the runtime).

The runner is the production SessionRunner (seeded credentials, as in a warm container; the
client is the unmodified boto3 one pointed at the local interpreter), so what these tests pin
is what dispatch gets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sandbox_runtime.runner import SessionRunner
from sandbox_runtime.runner import credentials as runner_credentials
from sandbox_runtime.runner.tool_calling import ToolLimits, ToolsRunner

from infra.local.interpreter import LocalInterpreterServer
from tests.support.runner import ACME_INTERPRETER, ACME_INTERPRETER_ARN, ACME_RUNNER_ROLE, session_runner

INTERPRETER = "sbx_test_acme_tools"
INTERPRETER_ARN = ACME_INTERPRETER_ARN.replace(ACME_INTERPRETER, INTERPRETER)
RUNNER_ROLE = ACME_RUNNER_ROLE


@dataclass
class ToolsSession:
    runner: SessionRunner
    interpreter_id: str
    session_id: str
    server: LocalInterpreterServer
    make: Callable[..., ToolsRunner]

    def tools(self, **limits: Any) -> ToolsRunner:
        return self.make(**limits)

    def alive(self) -> bool:
        found = self.server.session(self.session_id)
        return found is not None and found.status == "READY"


@pytest.fixture
def tools_session(
    interpreter: LocalInterpreterServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ToolsSession]:
    # Given the local interpreter, this tenant's interpreter registered, credentials cached
    interpreter.register_interpreter(INTERPRETER, "PUBLIC")
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", interpreter.endpoint)
    runner = session_runner(
        allowed_interpreter_ids=[INTERPRETER],
        allowed_interpreter_arns=[INTERPRETER_ARN],
        session_timeout_seconds=300,
        call_timeout_seconds=60,
    )
    credentials = runner.credentials  # keyed as the runner looks them up: role, tenant, its ARNs
    with runner_credentials._lock:
        runner_credentials._cache.clear()
        runner_credentials._cache[
            (credentials.role_arn, credentials.tenant_id, credentials.interpreter_arns)
        ] = runner_credentials._Entry(
            expires_at=datetime.now(UTC) + timedelta(hours=1),
            creds={"AccessKeyId": "ASIASEEDED0000000000", "SecretAccessKey": "x", "SessionToken": "y"},
        )
    # and a session that passed the real readiness preamble (redactor + tools runtime)
    session_id = runner.start_session(INTERPRETER, name="tools-test")

    def make(**limits: Any) -> ToolsRunner:
        return ToolsRunner(runner, limits=ToolLimits(**limits))

    yield ToolsSession(runner, INTERPRETER, session_id, interpreter, make)
    runner.stop_session(INTERPRETER, session_id)
    with runner_credentials._lock:
        runner_credentials._cache.clear()
