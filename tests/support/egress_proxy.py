"""The real egress proxy (and the local package index it routes to) for the in-process harness
(tests/support/stack.py): started as the local stack starts them (infra/local/egress.py), against
this test process's moto server, and attached to the session's local interpreter, so that
allowlist sessions of the `local` stage (acme's and globex's `allowlisted` template) start, bind
and go out as they do on a stack `sandboxctl local up` started.

One per test process (session-scoped `egress_proxy` fixture); import it into a conftest or a
module. Its routes may name test servers (`routes`, `route_ca`)."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sandbox_common import naming as n

from infra.cdk.config import build_config
from infra.local import egress
from infra.local.interpreter import LocalInterpreterServer
from infra.local.interpreter.egress import EgressProxy
from tests.conftest import free_port

START_SECONDS = 60


@dataclass(frozen=True)
class RunningProxy:
    proxy: EgressProxy
    plan: egress.EgressPlan


def _wait_up(url: str, proc: subprocess.Popen[bytes], context: ssl.SSLContext | None = None) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} during start-up")
        try:
            with urllib.request.urlopen(url, timeout=2, context=context):
                return
        except urllib.error.HTTPError:
            return  # it answers HTTP: up
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {START_SECONDS} s")


@contextlib.contextmanager
def running_proxy(directory: Path, moto_endpoint: str, routes: egress.TestRoutes) -> Iterator[RunningProxy]:
    plan = egress.prepare(directory, proxy_port=free_port(), index_port=free_port(), test=routes)
    if plan is None:
        pytest.fail(f"the egress proxy's venv is missing: make egress-runtime ({n.EGRESS_VENV_DIR})")
    tables = {spec.logical: spec.physical("local") for spec in n.ALL_TABLES}
    base = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    base |= {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
    base |= {"AWS_DEFAULT_REGION": "us-east-1"}
    logs = directory / "logs"
    logs.mkdir(exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, argv, env in (
            ("index", egress.index_argv(plan, sys.executable), base),
            ("egress", egress.proxy_argv(plan, "local", tables), egress.proxy_env(base, moto_endpoint)),
        ):
            with open(logs / f"{name}.log", "ab") as log:
                procs.append(
                    subprocess.Popen(
                        argv,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=str(egress.REPO_ROOT),
                        start_new_session=True,
                    )
                )
        _wait_up(f"https://127.0.0.1:{plan.index_port}/", procs[0], ssl._create_unverified_context())  # noqa: S323
        _wait_up(f"http://{plan.proxy_address}/", procs[1])
        yield RunningProxy(EgressProxy.parse(plan.proxy_address, str(plan.ca_cert)), plan)
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.fixture(scope="session")
def egress_proxy(
    moto_server: str, interpreter: LocalInterpreterServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    """The proxy and index of this test process, attached to its local interpreter (no test routes)."""
    assert build_config("local").tenant("acme") is not None
    with running_proxy(
        tmp_path_factory.mktemp("egress-proxy"), moto_server, egress.TestRoutes("", "")
    ) as running:
        interpreter.attach_egress(running.proxy)
        yield running
