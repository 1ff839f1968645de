"""Benchmarks of background jobs (issue 13) with real parts: moto's DynamoDB (serial server),
the local AgentCore interpreter (bubblewrap sessions), the runner with the tenant's STS
credentials — through the functions dispatch's call sites use (`dispatch.job_actions`).

- `job_submit_latency`: what a submit does beyond the steps every execute_code shares
  (idempotency, turn, pre-flight, quota) ÷ what a later plain `pass` call does beyond them:
  submit = the slot reservation (one DynamoDB transaction, the turn's session already known) +
  the launch call into the session; plain = the `executeCode` of `pass` + its audit PutItem (a
  submit writes its row only when the job ends). Samples alternate so noise hits both alike.
  Target ≤ 1.5. The shared steps would add the same time to both sides through dispatch (whose
  wiring of jobs is pending), which only moves the ratio towards 1.
- `job_poll_cost`: AWS API calls per `get_job` while the job runs, counted with a botocore hook
  on every client created in this process (STS credentials cached, as in a warm container).
  Target ≤ 2.
"""

from __future__ import annotations

import functools
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from dispatch import job_actions
from dispatch.job_flow import JobDeps
from dispatch.jobs import JobStore
from dispatch.runner import SessionRunner, credentials
from sandbox_common import audit, aws
from sandbox_common import naming as n
from sandbox_common.outcome import Outcome

from tests.benchmarks._report import emit

pytestmark = pytest.mark.bench

local_interpreter = pytest.importorskip("infra.local.interpreter")
INTERPRETER = "sbx_bench_acme_pub"
TARGET_SUBMIT_RATIO = 1.5
TARGET_POLL_CALLS = 2
_NOW = datetime(2026, 11, 23, tzinfo=UTC)


class Calls:
    """Every AWS API call made by botocore clients created after install(), in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def record(self, service: str, model: Any = None, **_: Any) -> None:
        with self._lock:
            self.calls.append(f"{service}:{model.name}")

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import botocore.session

        original = botocore.session.Session.create_client
        log = self

        def create_client(session: Any, *args: Any, **kwargs: Any) -> Any:
            client = original(session, *args, **kwargs)
            client.meta.events.register("before-parameter-build",
                                        functools.partial(log.record, client.meta.service_model.service_name))  # fmt: skip
            return client

        monkeypatch.setattr(botocore.session.Session, "create_client", create_client)


@pytest.fixture
def setup(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    calls = Calls()
    calls.install(monkeypatch)  # before any client of this test exists
    server = local_interpreter.LocalInterpreterServer(interpreters={INTERPRETER: "PUBLIC"}).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", server.endpoint)
    credentials.clear_cache()
    ddb = aws.client("dynamodb")
    for spec in (n.JOBS, n.INVOCATIONS, n.TURNS):
        ddb.create_table(**n.create_table_request(spec, "bench"))
    runner = SessionRunner(tenant_id="acme", allowed_interpreter_ids=[INTERPRETER],
                           runner_role_arn="arn:aws:iam::123456789012:role/thinkwork-bench-sbx-runner-acme",
                           session_timeout_seconds=900, call_timeout_seconds=30, stdout_cap_bytes=262_144,
                           stderr_cap_bytes=32_768)  # fmt: skip
    deps = JobDeps(store=JobStore(table_name=n.JOBS.physical("bench"), ddb=ddb), runner_for=lambda _t: runner,
                   audit_writer=audit.AuditWriter(table_name=n.INVOCATIONS.physical("bench"), dlq_url="unused",
                                                  ddb=ddb, sqs=aws.client("sqs")),
                   retention_days=30, turn_closed=lambda _t, _u: False)  # fmt: skip
    session_id = runner.start_session(INTERPRETER, name="bench")
    try:
        yield {"runner": runner, "deps": deps, "session": session_id, "calls": calls}
    finally:
        runner.stop_session(INTERPRETER, session_id)
        server.stop()
        credentials.clear_cache()


def _req(code: str, job_id: str | None = None) -> Any:
    return SimpleNamespace(tenant_id="acme", agent_id="agent-1", turn_id="turn-1", template_id="analyst",
                           call_id=f"call-{uuid.uuid4().hex[:8]}", user_id=None, invocation_source=None,
                           code=code, timeout_s=60, job_id=job_id)  # fmt: skip


def _submit(setup: dict[str, Any], code: str) -> dict[str, Any]:
    req = _req(code)
    record = job_actions.reserve(req, setup["deps"], invocation_id=str(uuid.uuid4()), environment=None,
                                 session_id=setup["session"], interpreter_id=INTERPRETER)  # fmt: skip
    return job_actions.launch(record, setup["deps"], code=code, session_id=setup["session"],
                              interpreter_id=INTERPRETER)  # fmt: skip


def _plain(setup: dict[str, Any]) -> None:
    """A later plain call's own steps: the code in the session, then its audit row."""
    result = setup["runner"].execute(INTERPRETER, setup["session"], "pass")
    assert result.exit_status == "ok"
    invocation_id = str(uuid.uuid4())
    row = Outcome(request=_req("pass"), invocation_id=invocation_id, started_at=_NOW, finished_at=_NOW,
                  exit_status="ok", result=result, session_id=setup["session"]).audit_row(30)  # fmt: skip
    setup["deps"].audit_writer.put(row)


def test_job_submit_latency(setup: dict[str, Any], bench_full: bool) -> None:
    # Given a warm session that already ran one job (the runtime travels once per session)
    runner, session = setup["runner"], setup["session"]
    assert runner.execute(INTERPRETER, session, "pass").exit_status == "ok"
    first = _submit(setup, "pass")
    job_actions.cancel(_req("", job_id=first["job_id"]), setup["deps"])
    rounds = 7 if bench_full else 2
    submit_s: list[float] = []
    plain_s: list[float] = []
    # When submits (each cancelled at once, to stay under 3 running jobs) alternate with `pass` calls
    for _ in range(rounds):
        started = time.perf_counter()
        answer = _submit(setup, "import time\ntime.sleep(30)")
        submit_s.append(time.perf_counter() - started)
        assert answer["status"] == "running"
        job_actions.cancel(_req("", job_id=answer["job_id"]), setup["deps"])
        started = time.perf_counter()
        _plain(setup)
        plain_s.append(time.perf_counter() - started)
    # Then a submit costs about what a plain call costs
    ratio = statistics.median(submit_s) / statistics.median(plain_s)
    emit("job_submit_latency", target=f"<= {TARGET_SUBMIT_RATIO}", ratio=ratio, rounds=rounds,
         scope="beyond the steps every execute_code shares (dispatch wiring pending)",
         submit_ms=round(statistics.median(submit_s) * 1000, 1),
         pass_ms=round(statistics.median(plain_s) * 1000, 1))  # fmt: skip
    assert len(submit_s) == rounds
    if bench_full:
        assert ratio <= TARGET_SUBMIT_RATIO


def test_job_poll_cost(setup: dict[str, Any]) -> None:
    # Given a running job, polled once (credentials cached)
    answer = _submit(setup, "import time\ntime.sleep(60)")
    poll = _req("", job_id=answer["job_id"])
    assert job_actions.get_job(poll, setup["deps"])["status"] == "running"
    calls: list[str] = setup["calls"].calls
    # When it is polled while running
    before, polls = len(calls), 5
    for _ in range(polls):
        assert job_actions.get_job(poll, setup["deps"])["status"] == "running"
    made = calls[before:]
    # Then each poll costs at most two AWS calls: the job record and one status call to the session
    per_poll = len(made) / polls
    emit("job_poll_cost", target=f"<= {TARGET_POLL_CALLS}", ratio=per_poll, calls_per_get_job=per_poll,
         by_operation=dict(Counter(made)))  # fmt: skip
    job_actions.cancel(poll, setup["deps"])
    assert len(made) >= polls  # the hook saw the calls
    assert per_poll <= TARGET_POLL_CALLS
