"""The emulator's fork servers: a function's workers are forked from one process that imported its
handler once in the function's environment, each starting from the state right after that import
(`fixture_functions/fork_fn` records every import of itself)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from infra.local import lambda_workers
from infra.local.lambda_emulator import FunctionSpec, LambdaEmulator
from infra.local.state import pid_alive

FIXTURES = Path(__file__).with_name("fixture_functions")
REPO = Path(__file__).resolve().parents[3]


def _spec(import_log: Path, **env: str) -> FunctionSpec:
    return FunctionSpec(
        name="fork",
        handler="fork_fn.handler.handler",
        # A fresh value per test: a fork server is shared by every emulator of this process whose
        # function has the same handler and environment.
        environment={"IMPORT_LOG": str(import_log), **env},
        task_root=str(FIXTURES),
        timeout_seconds=10,
        max_concurrency=2,
    )


@contextmanager
def _emulator(spec: FunctionSpec) -> Iterator[Any]:
    emulator = LambdaEmulator([spec]).start()
    try:
        yield boto3.client(
            "lambda", endpoint_url=emulator.endpoint, config=Config(retries={"max_attempts": 1})
        )
    finally:
        emulator.stop()


def _invoke(lam: Any) -> dict[str, Any]:
    out = lam.invoke(FunctionName="fork", Payload=b"{}")
    body = json.loads(out["Payload"].read())
    assert "FunctionError" not in out, body
    return body


def _imports(import_log: Path) -> list[int]:
    return [int(line) for line in import_log.read_text().split()]


def _cmdline(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


def test_fork_server_imports_a_handler_once_for_every_emulator_and_worker(tmp_path: Path) -> None:
    # Given a function whose worker served two calls in one emulator, which then stopped
    spec, log = _spec(tmp_path / "imports"), tmp_path / "imports"
    with _emulator(spec) as lam:
        first = _invoke(lam)
        assert _invoke(lam)["calls"] == 2
    # When a second emulator of the same function (same environment) starts a worker
    with _emulator(spec) as lam:
        second = _invoke(lam)
        server_cmdline = _cmdline(second["imported_by"])
    # Then the handler was imported once, by the fork server, whose children both workers are,
    # and the new worker starts from the state right after that import (its first call)
    assert _imports(log) == [first["imported_by"]] == [second["imported_by"]]
    assert first["ppid"] == second["ppid"] == first["imported_by"]
    assert len({first["pid"], second["pid"], first["imported_by"]}) == 3
    assert second["calls"] == 1
    assert b"--fork-server" in server_cmdline


def test_fork_server_is_one_per_function_environment(tmp_path: Path) -> None:
    # Given two functions with the same handler whose environments differ in one variable
    log = tmp_path / "imports"
    # When each runs a worker
    with _emulator(_spec(log, COLOUR="red")) as lam:
        red = _invoke(lam)
    with _emulator(_spec(log, COLOUR="blue")) as lam:
        blue = _invoke(lam)
    # Then each environment had its own import (a worker sees only its function's environment)
    assert sorted(_imports(log)) == sorted([red["imported_by"], blue["imported_by"]])
    assert red["imported_by"] != blue["imported_by"]


def test_forked_worker_holds_no_descriptor_of_the_fork_server(tmp_path: Path) -> None:
    # Given a forked worker
    with _emulator(_spec(tmp_path / "imports")) as lam:
        # When it lists its open file descriptors
        body = _invoke(lam)
    # Then there is no socket among them (it cannot ask the fork server for anything), only its
    # standard streams and the protocol's pipe
    assert not [t for t in body["fds"].values() if t.startswith("socket:")], body["fds"]
    assert {"0", "1", "2"} <= set(body["fds"]) and len(body["fds"]) <= 5, body["fds"]


def test_forked_worker_has_a_log_stream_of_its_own(tmp_path: Path) -> None:
    # Given two workers of one function, forked from one server
    spec = _spec(tmp_path / "imports")
    with _emulator(spec) as lam:
        first = _invoke(lam)
    with _emulator(spec) as lam:
        second = _invoke(lam)
    # Then each has its own log stream, in its environment as in its context
    assert first["stream_env"] == first["stream_context"]
    assert second["stream_env"] == second["stream_context"]
    assert first["stream_env"] != second["stream_env"]


def test_fork_server_killed_from_outside_is_started_again(tmp_path: Path) -> None:
    # Given a function's fork server, killed from outside after its first worker
    spec, log = _spec(tmp_path / "imports"), tmp_path / "imports"
    with _emulator(spec) as lam:
        server = _invoke(lam)["imported_by"]
    os.kill(server, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while pid_alive(server) and time.monotonic() < deadline:
        time.sleep(0.02)
    # When the function starts another worker
    with _emulator(spec) as lam:
        body = _invoke(lam)
    # Then a new fork server imported the handler and forked it
    assert body["imported_by"] != server
    assert _imports(log) == [server, body["imported_by"]]


def test_fork_server_that_stops_answering_is_killed_and_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a function's fork server (it must answer within 2 s), stopped after its first worker
    monkeypatch.setattr(lambda_workers, "START_SECONDS", 2)
    spec, log = _spec(tmp_path / "imports"), tmp_path / "imports"
    with _emulator(spec) as lam:
        server = _invoke(lam)["imported_by"]
    os.kill(server, signal.SIGSTOP)
    try:
        # When the function starts another worker
        with _emulator(spec) as lam:
            body = _invoke(lam)
    finally:
        if pid_alive(server):
            os.kill(server, signal.SIGCONT)
    # Then the stopped server was killed, and a new one imported the handler and forked it
    assert not pid_alive(server)
    assert body["imported_by"] != server and _imports(log) == [server, body["imported_by"]]


def test_handler_leaving_a_thread_after_import_gets_workers_of_their_own(tmp_path: Path) -> None:
    # Given a handler whose import leaves a thread running (a forked child would not have it)
    spec, log = _spec(tmp_path / "imports", START_THREAD="1"), tmp_path / "imports"
    # When two emulators run a worker each
    with _emulator(spec) as lam:
        first = _invoke(lam)
    with _emulator(spec) as lam:
        second = _invoke(lam)
        cmdline = _cmdline(second["pid"])
    # Then each worker imported the handler itself, as a process of its own (not a fork)
    assert first["imported_by"] == first["pid"] and second["imported_by"] == second["pid"]
    assert b"--fork-server" not in cmdline
    assert first["ppid"] == second["ppid"] == os.getpid()
    # (and the fork server, which imported it once, was asked for nothing more)
    imports = _imports(log)
    assert len(imports) == 3 and {first["pid"], second["pid"]} < set(imports)


def test_fork_server_and_its_workers_end_when_their_emulator_process_dies(tmp_path: Path) -> None:
    # Given a process that runs an emulator with a warm forked worker, killed without a stop
    log = tmp_path / "imports"
    script = textwrap.dedent(
        f"""
        import json, os, signal, sys
        import boto3
        from infra.local.lambda_emulator import FunctionSpec, LambdaEmulator
        spec = FunctionSpec(name="fork", handler="fork_fn.handler.handler",
                            environment={{"IMPORT_LOG": {str(log)!r}}}, task_root={str(FIXTURES)!r})
        emulator = LambdaEmulator([spec]).start()
        lam = boto3.client("lambda", endpoint_url=emulator.endpoint, region_name="us-east-1",
                           aws_access_key_id="x", aws_secret_access_key="x")
        body = json.loads(lam.invoke(FunctionName="fork", Payload=b"{{}}")["Payload"].read())
        print(json.dumps(body), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    body = json.loads(out.stdout)
    # When its fork server and worker are looked for
    left = {body["pid"], body["imported_by"]}
    deadline = time.monotonic() + 60
    while (left := {p for p in left if pid_alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    # Then both are gone: the worker saw its stdin close, and the server its socket
    assert not left, [(p, _cmdline(p)) for p in left]


def test_fork_server_environment_is_the_functions_own(tmp_path: Path) -> None:
    # Given a function run from a process whose own environment has a variable it does not define
    os.environ["FORK_TEST_CALLER_ONLY"] = uuid.uuid4().hex
    try:
        with _emulator(_spec(tmp_path / "imports")) as lam:
            body = _invoke(lam)
    finally:
        del os.environ["FORK_TEST_CALLER_ONLY"]
    # When the fork server's environment is read from /proc
    raw = Path(f"/proc/{body['imported_by']}/environ").read_bytes()
    environ = dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
    # Then it is the function's (nothing of the caller's)
    assert environ["IMPORT_LOG"] == str(tmp_path / "imports")
    assert "FORK_TEST_CALLER_ONLY" not in environ
