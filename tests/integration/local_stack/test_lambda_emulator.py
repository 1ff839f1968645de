"""The local Lambda emulator, driven by the unmodified boto3 lambda client, against a test-only
handler (`fixture_functions/echo_fn`) so these tests do not depend on the real functions."""

from __future__ import annotations

import http.client
import json
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from infra.local import stack
from infra.local.lambda_emulator import FunctionSpec, LambdaEmulator

FIXTURES = Path(__file__).with_name("fixture_functions")
FUNCTION_ENV = {"SANDBOX_STAGE": "local", "FOO": "bar"}
# Variables the Lambda runtime itself provides (not part of a function's definition), plus the
# locale variable Python adds on start-up (PEP 538).
RUNTIME_VARS = {
    "PATH",
    "LANG",
    "TZ",
    "PYTHONDONTWRITEBYTECODE",
    "LAMBDA_TASK_ROOT",
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_VERSION",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "AWS_LAMBDA_LOG_GROUP_NAME",
    "AWS_LAMBDA_LOG_STREAM_NAME",
    "AWS_EXECUTION_ENV",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "LC_CTYPE",
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[LambdaEmulator]:
    spec = FunctionSpec(
        name="echo",
        handler="echo_fn.handler.handler",
        environment=FUNCTION_ENV,
        task_root=str(FIXTURES),
        timeout_seconds=2,
        max_concurrency=2,
        aliases=("live", "scope_acme"),
    )
    emu = LambdaEmulator([spec]).start()
    yield emu
    emu.stop()


@pytest.fixture
def lam(emulator: LambdaEmulator) -> Any:
    return boto3.client("lambda", endpoint_url=emulator.endpoint, config=Config(retries={"max_attempts": 1}))


def _invoke(lam: Any, event: dict[str, Any], name: str = "echo") -> tuple[dict[str, Any], Any]:
    out = lam.invoke(FunctionName=name, Payload=json.dumps(event).encode())
    return out, json.loads(out["Payload"].read())


def test_emulator_invoke_returns_handler_result_and_context(lam: Any) -> None:
    # Given an event
    event = {"hello": "world", "n": [1, 2]}
    # When it is invoked RequestResponse
    out, body = _invoke(lam, event)
    # Then the handler's return value comes back with a context like Lambda's
    assert out["StatusCode"] == 200 and "FunctionError" not in out
    assert body["event"] == event
    assert body["function_name"] == "echo" and body["request_id"]
    assert 0 < body["remaining_ms"] <= 2000


def test_emulator_worker_env_is_exactly_function_env_plus_runtime_vars(lam: Any) -> None:
    # Given a function defined with FUNCTION_ENV, invoked from a process with a rich environment
    # When the handler reports its os.environ
    _, body = _invoke(lam, {})
    # Then it holds the definition's variables and nothing of the caller's (no AWS_ACCESS_KEY_ID leak)
    env = body["env"]
    assert {k: env[k] for k in FUNCTION_ENV} == FUNCTION_ENV
    assert set(env) - set(FUNCTION_ENV) <= RUNTIME_VARS, set(env) - set(FUNCTION_ENV) - RUNTIME_VARS
    assert env["AWS_LAMBDA_FUNCTION_NAME"] == "echo"


def test_emulator_unhandled_exception_sets_function_error(lam: Any) -> None:
    # Given a handler that raises
    # When invoked
    out, body = _invoke(lam, {"raise": "boom"})
    # Then Lambda's unhandled-error shape comes back, status 200 with X-Amz-Function-Error
    assert out["StatusCode"] == 200
    assert out["FunctionError"] == "Unhandled"
    assert body["errorType"] == "ValueError" and body["errorMessage"] == "boom"
    assert any("handler.py" in line for line in body["stackTrace"])


def test_emulator_unknown_function_is_resource_not_found(lam: Any) -> None:
    # Given no function named "missing"
    # When invoked
    with pytest.raises(ClientError) as err:
        lam.invoke(FunctionName="missing", Payload=b"{}")
    # Then boto3 raises ResourceNotFoundException, as AWS does
    assert err.value.response["Error"]["Code"] == "ResourceNotFoundException"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_emulator_non_json_payload_is_invalid_request_content(lam: Any) -> None:
    # Given a payload that is not JSON
    # When invoked
    with pytest.raises(ClientError) as err:
        lam.invoke(FunctionName="echo", Payload=b"{not json")
    # Then Lambda's 400 InvalidRequestContentException
    assert err.value.response["Error"]["Code"] == "InvalidRequestContentException"


def test_emulator_accepts_function_arn_and_qualifier(lam: Any) -> None:
    # Given the function's ARN with a qualifier
    arn = "arn:aws:lambda:us-east-1:123456789012:function:echo:$LATEST"
    # When invoked by ARN
    out, body = _invoke(lam, {"via": "arn"}, name=arn)
    # Then it is the same function
    assert "FunctionError" not in out and body["event"] == {"via": "arn"}


ECHO_ARN = "arn:aws:lambda:us-east-1:123456789012:function:echo"


@pytest.mark.parametrize(
    ("name", "qualifier", "invoked"),
    [
        ("echo", None, ECHO_ARN),  # unqualified: the function's own ARN
        ("echo", "scope_acme", f"{ECHO_ARN}:scope_acme"),  # Qualifier parameter
        ("echo:scope_acme", None, f"{ECHO_ARN}:scope_acme"),  # name:alias
        (f"{ECHO_ARN}:live", None, f"{ECHO_ARN}:live"),  # full alias ARN
        ("123456789012:function:echo:live", None, f"{ECHO_ARN}:live"),  # partial ARN
        (f"{ECHO_ARN}:scope_acme", "scope_acme", f"{ECHO_ARN}:scope_acme"),  # both, agreeing
        ("echo", "$LATEST", f"{ECHO_ARN}:$LATEST"),
    ],
)
def test_emulator_reports_the_invoked_arn_with_its_qualifier_as_lambda_does(
    lam: Any, name: str, qualifier: str | None, invoked: str
) -> None:
    # Given the function with aliases `live` and `scope_acme` (both to $LATEST)
    # When it is invoked by this name (and Qualifier)
    extra = {"Qualifier": qualifier} if qualifier else {}
    out = lam.invoke(FunctionName=name, Payload=b"{}", **extra)
    body = json.loads(out["Payload"].read())
    # Then the handler's context.invoked_function_arn is the ARN invoked, qualifier included (the
    # Python runtime's context: "indicates if the invoker specified a version number or alias"),
    # and the version that ran is the one the alias points to
    assert body["invoked_function_arn"] == invoked
    assert body["function_version"] == "$LATEST" and out["ExecutedVersion"] == "$LATEST"


@pytest.mark.parametrize(
    ("name", "qualifier", "code", "status", "arn"),
    [
        ("echo:nope", None, "ResourceNotFoundException", 404, f"{ECHO_ARN}:nope"),
        ("echo", "scope_globex", "ResourceNotFoundException", 404, f"{ECHO_ARN}:scope_globex"),
        ("echo", "1", "ResourceNotFoundException", 404, f"{ECHO_ARN}:1"),  # no published versions
        ("echo:live", "scope_acme", "InvalidParameterValueException", 400, None),  # two that disagree
    ],
)
def test_emulator_unknown_or_conflicting_qualifier_is_refused_and_runs_nothing(
    lam: Any, name: str, qualifier: str | None, code: str, status: int, arn: str | None
) -> None:
    extra = {"Qualifier": qualifier} if qualifier else {}
    # When invoked with a qualifier the function does not have (or two that disagree)
    with pytest.raises(ClientError) as err:
        lam.invoke(FunctionName=name, Payload=b"{}", **extra)
    # Then Lambda's error, naming the qualified ARN it did not find
    assert err.value.response["Error"]["Code"] == code
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    if arn:
        assert err.value.response["Error"]["Message"] == f"Function not found: {arn}"


def test_emulator_reuses_warm_workers(lam: Any) -> None:
    # Given sequential invocations
    # When the same function is invoked three times
    bodies = [_invoke(lam, {})[1] for _ in range(3)]
    # Then at least one worker served more than one call (module state survives, as in Lambda)
    assert max(b["calls_in_this_worker"] for b in bodies) >= 2


def test_emulator_runs_concurrent_invocations_concurrently(
    lam: Any, emulator: LambdaEmulator, tmp_path: Path
) -> None:
    # Given a max concurrency of 2, and two warm workers (two calls at once start one each)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda _: _invoke(lam, {"ok": 1}), range(2)))
    # When two invocations are sent at the same time, each waiting until both have arrived
    meet = {"meet": str(tmp_path), "party": 2}
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: _invoke(lam, meet)[1], range(2)))
    # Then two different worker processes served them, each while the other was running
    assert len({r["pid"] for r in results}) == 2
    assert [r["met"] for r in results] == [True, True]


def test_emulator_timeout_kills_worker_and_reports_timeout(lam: Any) -> None:
    # Given a handler that runs past the function timeout (2 s)
    # When invoked
    out, body = _invoke(lam, {"sleep": 10})
    # Then Lambda's timeout error comes back, and the next call still works (fresh worker)
    assert out["FunctionError"] == "Unhandled"
    assert "Task timed out after 2.00 seconds" in body["errorMessage"]
    again, after = _invoke(lam, {"ok": 1})
    assert "FunctionError" not in again and after["event"] == {"ok": 1}


def test_emulator_crashed_worker_is_replaced(lam: Any) -> None:
    # Given a handler that kills its own process
    # When invoked
    out, body = _invoke(lam, {"exit": True})
    # Then the call fails like a runtime exit, and the next call is served by a new worker
    assert out["FunctionError"] == "Unhandled" and body["errorType"] == "Runtime.ExitError"
    again, after = _invoke(lam, {"n": 2})
    assert "FunctionError" not in again and after["event"] == {"n": 2}


def test_emulator_sigkilled_worker_is_reported_at_once_as_runtime_exit_not_timeout(lam: Any) -> None:
    # Given a handler whose process is SIGKILLed mid-call (it was reported as "Task timed out"
    # once the pipe closed, because a SIGKILLed worker looked like one killed at the deadline)
    started = time.monotonic()
    # When invoked
    out, body = _invoke(lam, {"sigkill": True})
    elapsed = time.monotonic() - started
    # Then the answer is a runtime exit, well before the 2-second function timeout
    assert out["FunctionError"] == "Unhandled"
    assert body["errorType"] == "Runtime.ExitError", body
    assert "timed out" not in body["errorMessage"]
    assert elapsed < 1.5, elapsed


def test_emulator_import_error_is_reported_on_invoke(tmp_path: Path) -> None:
    # Given a function whose handler module cannot be imported
    spec = FunctionSpec(
        name="broken", handler="no_such_module.handler.handler", environment={}, task_root=str(tmp_path)
    )
    emu = LambdaEmulator([spec]).start()
    try:
        lam = boto3.client("lambda", endpoint_url=emu.endpoint)
        # When invoked
        out, body = _invoke(lam, {}, name="broken")
    finally:
        emu.stop()
    # Then the Lambda runtime's import error comes back as an unhandled function error
    assert out["FunctionError"] == "Unhandled"
    assert body["errorType"] == "Runtime.ImportModuleError"


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_emulator_deeply_nested_event_gets_a_structured_answer(lam: Any, depth: int) -> None:
    # Given valid JSON nested deeper than Python's parser goes
    payload = ("[" * depth + "]" * depth).encode()
    # When invoked
    out = lam.invoke(FunctionName="echo", Payload=payload)
    body = json.loads(out["Payload"].read())
    # Then the emulator answers like Lambda's Python runtime (an unmarshal error), and keeps serving
    assert out["StatusCode"] == 200 and out["FunctionError"] == "Unhandled"
    assert body["errorType"] == "Runtime.UnmarshalError"
    again, after = _invoke(lam, {"n": 3})
    assert "FunctionError" not in again and after["event"] == {"n": 3}


def test_emulator_bad_content_length_gets_a_structured_answer(emulator: LambdaEmulator) -> None:
    # Given a request whose Content-Length is not a number
    host, port = emulator.endpoint.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.putrequest("POST", "/2015-03-31/functions/echo/invocations")
    conn.putheader("Content-Length", "not-a-number")
    conn.endheaders()
    # When the answer is read
    response = conn.getresponse()
    # Then it is a structured 400, not a closed connection
    assert response.status == 400
    assert response.getheader("x-amzn-ErrorType") == "InvalidRequestContentException"
    conn.close()


def _workers() -> list[int]:
    return [
        p
        for p in stack.descendants(os.getpid())
        if b"lambda_worker" in Path(f"/proc/{p}/cmdline").read_bytes()
    ]


def test_emulator_worker_killed_from_outside_is_a_runtime_exit_not_a_timeout(lam: Any) -> None:
    # Given a call in progress (the handler sleeps 10 s; the function timeout is 2 s)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(_invoke, lam, {"sleep": 10})
        deadline = time.monotonic() + 10
        while not _workers() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        # When every worker process is killed from outside (busy and idle ones)
        killed_at = time.monotonic()
        victims = _workers()
        assert victims
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        out, body = pending.result(timeout=30)
        elapsed = time.monotonic() - killed_at
    # Then the call fails at once as a runtime exit (not "Task timed out"), and the next call works
    assert out["FunctionError"] == "Unhandled" and body["errorType"] == "Runtime.ExitError"
    assert elapsed < 1.5, elapsed
    again, after = _invoke(lam, {"n": 4})
    assert "FunctionError" not in again and after["event"] == {"n": 4}
