"""Fixtures shared by every test directory. Area-specific fixtures live in the area's conftest."""

from __future__ import annotations

import os
import socket

# jsii (aws_cdk) prints a Node end-of-life banner on every start otherwise.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
# aws-cdk-lib's built-in CloudFormation validation (a WebAssembly rule engine started by the first
# synth of every process: ~4 s of CPU, far more on a loaded machine) only ever warns unless
# @aws-cdk/core:validateAgainstDefaultRules is set, which cdk.json does not: the templates are the
# same without it, and cdk-nag and cfn-lint still check them. Read by jsii's Node process at start.
os.environ.setdefault("CDK_VALIDATION", "false")
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support import botocore_models, sizes
from tests.support.synth import SharedSynth

# Fresh clients per test, one parsed copy of botocore's model files per process (see the module).
botocore_models.install()

# Every process a test starts is charged to it (the guard of tests/unit/conftest.py, --process-probe).
pytest_plugins = ["tests.support.process_hooks"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--bench-full", action="store_true", help="benchmarks at full size (make bench)")
    parser.addoption(
        "--reliability-full", action="store_true", help="full reliability suite (make reliability)"
    )


def pytest_configure(config: pytest.Config) -> None:
    sizes.FULL = bool(config.getoption("--reliability-full"))


@pytest.fixture(scope="session")
def bench_full(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--bench-full"))


@pytest.fixture(scope="session")
def reliability_full(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--reliability-full"))


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> SharedSynth:
    """synth(stage) -> {stack name: template}: each stage synthesized once per run, shared by
    every xdist worker (tests/support/synth.py)."""
    # Imported here: aws_cdk starts jsii (Node), which only the processes that synthesize need.
    from infra.cdk.app_factory import synth_stage

    under_xdist = bool(os.environ.get("PYTEST_XDIST_WORKER"))  # set in each xdist worker
    shared = tmp_path_factory.getbasetemp().parent / "synth" if under_xdist else None
    return SharedSynth(shared, synth_stage)


@dataclass
class LambdaContext:
    function_name: str = "test-function"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:test-function"
    aws_request_id: str = "11111111-2222-3333-4444-555555555555"
    log_group_name: str = "/aws/lambda/test-function"
    log_stream_name: str = "2026/11/21/[$LATEST]abc"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


@pytest.fixture
def lambda_context() -> LambdaContext:
    return LambdaContext()


_AWS_ENV_TO_CLEAR = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE",
    "AWS_ENDPOINT_URL_LAMBDA",
    "SANDBOX_LOCAL",
)


@pytest.fixture(autouse=True)
def _isolated_aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test can reach real AWS, and no cache leaks between tests."""
    if os.environ.get("SANDBOX_E2E") == "1":  # tests/e2e use the real credential chain
        yield
        return
    for key in _AWS_ENV_TO_CLEAR:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "ThinkworkSandbox")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "sandbox-test")
    _clear_caches()
    yield
    _clear_caches()


def _clear_caches() -> None:
    from sandbox_common import aws, settings

    aws.clear_clients()
    settings.clear_caches()
    try:  # the quota Lambda's cap cache, when a test ran its handler in-process
        from quota_check.caps import clear_caches as clear_cap_caches

        clear_cap_caches()
    except ImportError:  # pragma: no cover
        pass
    try:  # the artifacts' S3 client (its endpoint is the moto server the test that made it used)
        from sandbox_runtime.artifacts import s3_client

        s3_client.cache_clear()
    except ImportError:  # pragma: no cover
        pass
    try:
        from aws_lambda_powertools.utilities import parameters

        parameters.clear_caches()
    except ImportError:  # pragma: no cover
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """One real moto server for the whole run, serving one request at a time like DynamoDB's
    per-item atomicity (see infra/local/moto_serial.py); tests reset it via `moto_endpoint`."""
    import logging

    from infra.local.moto_serial import SerialMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = SerialMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        yield server.endpoint
    finally:
        server.stop()


@pytest.fixture
def moto_endpoint(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A clean moto server, with every boto3 client in this process pointed at it."""
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST")).read()
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    _clear_caches()
    return moto_server
