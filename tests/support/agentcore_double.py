"""An AgentCore Code Interpreter test double at the HTTP level, for the UNMODIFIED boto3 client.

A botocore `before-send` hook answers Start/Invoke/Stop/Get with real HTTP responses: JSON for
the control calls, real event-stream frames (infra.local.eventstream) for InvokeCodeInterpreter,
so botocore's own parser, error parser and retry logic all run. Every request is recorded.

By default an executeCode call really runs the code in a fresh `python -c` subprocess and
answers with its stdout/stderr/exit code (so the real readiness preamble is really executed);
tests queue scripted answers with `fake.script_invoke(...)`.
STS is moto's (a real AssumeRole over HTTP), via the shared `moto_endpoint` fixture.

The fixtures are re-exported by tests/unit/runner/conftest.py (where every executeCode must be
scripted: a unit test starts no process) and tests/integration/runner/conftest.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from botocore.awsrequest import AWSResponse
from sandbox_runtime.runner import credentials as runner_credentials

from infra.local import eventstream as es
from tests.support.runner import ACME_INTERPRETER, ACME_INTERPRETER_ARN, ACME_RUNNER_ROLE, session_runner

INTERPRETER = ACME_INTERPRETER
OTHER_TENANT_INTERPRETER = "sbx_test_globex_pub"
RUNNER_ROLE = ACME_RUNNER_ROLE


@dataclass
class Recorded:
    operation: str
    interpreter_id: str
    session_id: str | None
    body: dict[str, Any]
    access_key_id: str

    @property
    def code(self) -> str | None:
        return (self.body.get("arguments") or {}).get("code")


class _Raw:
    """What AWSResponse.raw must offer: `.stream()` (botocore's EventStream and `.content` use it)."""

    def __init__(self, payload: bytes | list[bytes], delay_between: float = 0.0) -> None:
        self._chunks = [payload] if isinstance(payload, bytes) else list(payload)
        self._delay = delay_between

    def stream(self, *_args: Any, **_kwargs: Any) -> Iterator[bytes]:
        for i, chunk in enumerate(self._chunks):
            if i and self._delay:
                time.sleep(self._delay)
            yield chunk

    def read(self, *_args: Any, **_kwargs: Any) -> bytes:
        return b"".join(self._chunks)

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


@dataclass
class Invoke:
    """A scripted InvokeCodeInterpreter answer: frames (sent one by one), or an HTTP error."""

    frames: list[bytes] | None = None
    error: tuple[int, str, str] | None = None  # (status, error type, message)
    delay_before: float = 0.0
    delay_between: float = 0.0


class FakeAgentCore:
    INTERPRETER = INTERPRETER
    OTHER_TENANT_INTERPRETER = OTHER_TENANT_INTERPRETER
    RUNNER_ROLE = RUNNER_ROLE
    Invoke = Invoke

    @staticmethod
    def result(**kwargs: Any) -> Invoke:
        """One scripted answer made of a single result frame."""
        return Invoke(frames=[es.result_frame(**kwargs)])

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.scripted: deque[Invoke] = deque()
        self.start_error: tuple[int, str, str] | None = None
        self.stop_error: tuple[int, str, str] | None = None
        self._sessions = 0
        self._active = 0
        self._lock = threading.Lock()

    # --- test API -------------------------------------------------------------------------------
    def script_invoke(self, *answers: Invoke) -> None:
        self.scripted.extend(answers)

    def ops(self, operation: str | None = None) -> list[Recorded]:
        return [r for r in self.requests if operation is None or r.operation == operation]

    def wait_idle(self, timeout: float = 5.0) -> None:
        end = time.monotonic() + timeout
        while self._active and time.monotonic() < end:
            time.sleep(0.02)

    # --- botocore hook --------------------------------------------------------------------------
    def handle(self, request: Any, event_name: str = "", **_kwargs: Any) -> AWSResponse:
        operation = event_name.rsplit(".", 1)[-1]
        parts = urlsplit(request.url)
        segments = parts.path.split("/")
        interpreter_id = unquote(segments[2]) if len(segments) > 2 else ""
        query = parse_qs(parts.query)
        session_id = request.headers.get("x-amzn-code-interpreter-session-id")
        if isinstance(session_id, bytes):
            session_id = session_id.decode()
        session_id = session_id or (query.get("sessionId") or [None])[0]
        raw_body = request.body or b"{}"
        body = json.loads(raw_body.decode("utf-8") if isinstance(raw_body, bytes) else raw_body)
        auth = request.headers.get("Authorization", b"")
        auth = auth.decode() if isinstance(auth, bytes) else auth
        access_key = auth.split("Credential=", 1)[1].split("/", 1)[0] if "Credential=" in auth else ""
        with self._lock:
            self.requests.append(Recorded(operation, interpreter_id, session_id, body, access_key))
            self._active += 1
        try:
            return self._answer(request.url, operation, interpreter_id, body)
        finally:
            with self._lock:
                self._active -= 1

    def _answer(self, url: str, operation: str, interpreter_id: str, body: dict[str, Any]) -> AWSResponse:
        if operation == "StartCodeInterpreterSession":
            if self.start_error:
                return _error(url, *self.start_error)
            self._sessions += 1
            return _json(
                url,
                {
                    "codeInterpreterIdentifier": interpreter_id,
                    "sessionId": f"sess{self._sessions:04d}",
                    "createdAt": "2026-11-21T08:00:00Z",
                },
            )
        if operation == "StopCodeInterpreterSession":
            if self.stop_error:
                return _error(url, *self.stop_error)
            return _json(
                url,
                {
                    "codeInterpreterIdentifier": interpreter_id,
                    "sessionId": "x",
                    "lastUpdatedAt": "2026-11-21T08:00:00Z",
                },
            )
        if operation == "InvokeCodeInterpreter":
            answer = self.scripted.popleft() if self.scripted else _run_for_real(body["arguments"]["code"])
            if answer.delay_before:
                time.sleep(answer.delay_before)
            if answer.error:
                return _error(url, *answer.error)
            return AWSResponse(
                url,
                200,
                {
                    "content-type": "application/vnd.amazon.eventstream",
                    "x-amzn-code-interpreter-session-id": "s",
                },
                _Raw(answer.frames or [], answer.delay_between),
            )
        raise AssertionError(f"unexpected operation {operation}")


def _json(url: str, payload: dict[str, Any]) -> AWSResponse:
    return AWSResponse(url, 200, {"content-type": "application/json"}, _Raw(json.dumps(payload).encode()))


def _error(url: str, status: int, error_type: str, message: str) -> AWSResponse:
    headers = {"content-type": "application/json", "x-amzn-errortype": error_type}
    return AWSResponse(url, status, headers, _Raw(json.dumps({"message": message}).encode()))


def _run_for_real(code: str) -> Invoke:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    return Invoke(
        frames=[
            es.result_frame(
                stdout=done.stdout,
                stderr=done.stderr,
                exit_code=done.returncode,
                is_error=done.returncode != 0,
            )
        ]
    )


OTHER_RUNNER_ROLE = ACME_RUNNER_ROLE  # the stage has one runner role; globex differs by session policy
OTHER_TENANT_INTERPRETER_ARN = ACME_INTERPRETER_ARN.replace(ACME_INTERPRETER, OTHER_TENANT_INTERPRETER)


@pytest.fixture
def fake_agentcore(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAgentCore]:
    """The double wired into every client the runner builds (the clients themselves unmodified).

    Credentials for the test roles are pre-seeded in the runner's cache, as in a warm container,
    so tests that are not about credentials skip STS (creating an STS client per test is most of
    a test's time on these machines). Tests about credentials add the `sts` fixture: it empties
    the cache so every AssumeRole really goes to moto's STS.
    """
    fake = FakeAgentCore()
    real_new_client = runner_credentials.new_client

    def new_client(service: str, config: Any, creds: dict[str, Any]) -> Any:
        built = real_new_client(service, config, creds)
        built.meta.events.register(f"before-send.{service}", fake.handle)
        return built

    monkeypatch.setattr(runner_credentials, "new_client", new_client)
    _forget_credentials()
    # Keyed (role ARN, tenant, interpreter ARNs): credentials confined to one tenant serve only it.
    seeded = (
        (RUNNER_ROLE, "acme", (ACME_INTERPRETER_ARN,)),
        (OTHER_RUNNER_ROLE, "globex", (OTHER_TENANT_INTERPRETER_ARN,)),
    )
    for number, key in enumerate(seeded):
        runner_credentials._cache[key] = runner_credentials._Entry(
            expires_at=datetime.now(UTC) + timedelta(hours=1),
            creds={"AccessKeyId": f"ASIASEEDED{number:010d}", "SecretAccessKey": "x", "SessionToken": "y"},
        )
    yield fake
    fake.wait_idle()
    _forget_credentials()


def _forget_credentials() -> None:
    """Drop cached credentials and clients, but keep the shared boto3 session: its loader has
    the parsed service model, which is what makes client creation cheap (as in a warm Lambda)."""
    with runner_credentials._lock:
        runner_credentials._cache.clear()


@pytest.fixture
def sts(fake_agentcore: FakeAgentCore, moto_endpoint: str) -> str:
    """Real AssumeRole against moto's STS: no seeded credentials."""
    _forget_credentials()
    return moto_endpoint


@pytest.fixture
def assume_role_calls(sts: str) -> Callable[[], int]:
    """Counts real AssumeRole calls made through the shared STS client."""
    from sandbox_common import aws

    calls: list[str] = []
    aws.client("sts").meta.events.register("before-call.sts.AssumeRole", lambda **kw: calls.append("x"))
    return lambda: len(calls)


@pytest.fixture
def make_runner() -> Callable[..., Any]:
    """A SessionRunner for tenant acme with the spec defaults; keyword overrides."""
    return session_runner
