"""Real parts for the files tests (docs/files.md): the local interpreter running sessions on the
session runtime (.venv-session, built by `make session-runtime`, a dependency of `make test`), and
moto's S3."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from sandbox_common import naming as n

from infra.local.interpreter import LocalInterpreterServer
from tests.integration.interpreter._helpers import make_client

ROOT = Path(__file__).resolve().parents[3]
SESSION_PYTHON = ROOT / n.SESSION_VENV_DIR / "bin" / "python"
ACME_CI = "sbx_files_acme_pub"
GLOBEX_CI = "sbx_files_globex_pub"
BUCKET = "thinkwork-test-artifacts"


class LocalCredentials:
    """Stands where TenantCredentials stands: hands out the data-plane client (STS is not what
    these tests are about; the client is the real boto3 one against the local interpreter)."""

    def __init__(self, endpoint: str) -> None:
        self.client = make_client(endpoint)

    def invoke_client(self) -> Any:
        return self.client


@pytest.fixture(scope="module")
def files_interpreter() -> Iterator[LocalInterpreterServer]:
    assert SESSION_PYTHON.exists(), "the session runtime is missing: run `make session-runtime`"
    server = LocalInterpreterServer(
        interpreters={ACME_CI: "PUBLIC", GLOBEX_CI: "PUBLIC"}, python=str(SESSION_PYTHON)
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture
def acme_session(files_interpreter: LocalInterpreterServer) -> Iterator[str]:
    client = make_client(files_interpreter.endpoint)
    session_id = client.start_code_interpreter_session(
        codeInterpreterIdentifier=ACME_CI, sessionTimeoutSeconds=300
    )["sessionId"]
    yield session_id
    try:
        client.stop_code_interpreter_session(codeInterpreterIdentifier=ACME_CI, sessionId=session_id)
    except client.exceptions.ResourceNotFoundException:
        pass


@pytest.fixture
def s3(moto_endpoint: str) -> Any:
    # SigV4, as dispatch signs (SSE-KMS objects cannot be fetched with SigV2 presigned URLs).
    client = boto3.client("s3", region_name="us-east-1", config=Config(signature_version="s3v4"))
    client.create_bucket(Bucket=BUCKET)
    return client
