"""Fixtures for the local Code Interpreter: a real server on 127.0.0.1 and the raw boto3 client.

Tests talk to the server only through the unmodified `bedrock-agentcore` client (endpoint_url
changed), so they pin the wire protocol, not the server's internals.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from infra.local.interpreter import LocalInterpreterServer
from tests.integration.interpreter._helpers import OTHER_CI, PUBLIC_CI, SANDBOX_CI, make_client


@pytest.fixture(scope="module")
def server() -> Iterator[LocalInterpreterServer]:
    srv = LocalInterpreterServer(
        interpreters={PUBLIC_CI: "PUBLIC", SANDBOX_CI: "SANDBOX", OTHER_CI: "PUBLIC"}
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server: LocalInterpreterServer) -> Any:
    return make_client(server.endpoint)


@pytest.fixture
def session(client: Any) -> Iterator[str]:
    """A READY session on the PUBLIC interpreter, stopped afterwards if still running."""
    session_id = client.start_code_interpreter_session(
        codeInterpreterIdentifier=PUBLIC_CI, sessionTimeoutSeconds=120
    )["sessionId"]
    yield session_id
    try:
        client.stop_code_interpreter_session(codeInterpreterIdentifier=PUBLIC_CI, sessionId=session_id)
    except client.exceptions.ResourceNotFoundException:
        pass
