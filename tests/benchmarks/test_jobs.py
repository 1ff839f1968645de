"""Benchmarks of background jobs through dispatch (`Dispatcher.handle`, in-process
with its CDK environment) on the shared real-parts harness: moto's serial server, the local
AgentCore interpreter (bubblewrap sessions), the quota Lambda in the local Lambda emulator.

- `job_submit_latency`: a `background: true` execute_code (its answer: `running` + job_id) ÷ a
  later plain `execute_code` of `pass` in the same turn (live session, warm container). Both go
  the whole way: turn + token, idempotency, pre-flight, quota; then the submit reserves a slot
  (one DynamoDB transaction) and launches the supervisor in the session, where the plain call
  runs `pass`, collects artifacts and writes its audit row. Samples alternate so noise hits both
  alike; each job is cancelled before the next round (≤ 3 running per turn). Target ≤ 1.5.
- `job_poll_cost`: AWS API calls per `get_job` while the job runs, counted with a botocore hook
  on every client of a cold dispatch container (credentials then cached, as in a warm one):
  the job item (its turn token checked against the hash kept on it) and one status call
  to the session. Target ≤ 2.
"""

from __future__ import annotations

import functools
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.benchmarks._report import emit
from tests.support import stack as harness
from tests.support.stack import Stack, event, get_job_event

pytestmark = pytest.mark.bench

interpreter = harness.interpreter
stack = harness.stack
TARGET_SUBMIT_RATIO = 1.5
TARGET_POLL_CALLS = 2
SLEEPER = "import time\ntime.sleep(60)"


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
            client.meta.events.register(
                "before-parameter-build",
                functools.partial(log.record, client.meta.service_model.service_name),
            )
            return client

        monkeypatch.setattr(botocore.session.Session, "create_client", create_client)


@pytest.fixture
def counted(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Stack, Calls]]:
    """The harness with a cold dispatch container whose every client is hooked."""
    from dispatch import parts as dependencies
    from dispatch.quota import client as quota_client
    from sandbox_common import aws
    from sandbox_runtime.runner import clear_cache

    calls = Calls()
    calls.install(monkeypatch)
    aws.clear_clients()
    dependencies.reset()
    clear_cache()
    quota_client.lambda_client.cache_clear()
    yield stack, calls


def _timed(stack: Stack, request: dict[str, Any]) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    answer = stack.dispatch(request)
    return answer, time.perf_counter() - started


def test_job_submit_latency(stack: Stack, bench_full: bool) -> None:
    # Given a turn with a live session that already ran a job (the runtime travels once per session)
    assert stack.dispatch(event(call_id="warm-0", code="pass"))["ok"] is True
    first = stack.dispatch(event(call_id="warm-1", code="pass", background=True))
    stack.dispatch(get_job_event("turn-1", first["job_id"], "cancel_job"))
    rounds = 7 if bench_full else 2
    submit_s: list[float] = []
    plain_s: list[float] = []
    # When submits (each cancelled at once) alternate with plain `pass` calls, all through dispatch
    for i in range(rounds):
        answer, took = _timed(stack, event(call_id=f"job-{i}", code=SLEEPER, background=True))
        assert answer["status"] == "running", answer
        submit_s.append(took)
        stack.dispatch(get_job_event("turn-1", answer["job_id"], "cancel_job"))
        plain, took = _timed(stack, event(call_id=f"pass-{i}", code="pass"))
        assert plain["ok"] is True
        plain_s.append(took)
    # Then a submit costs about what a plain call costs
    ratio = statistics.median(submit_s) / statistics.median(plain_s)
    emit(
        "job_submit_latency",
        target=f"<= {TARGET_SUBMIT_RATIO}",
        ratio=ratio,
        rounds=rounds,
        scope="through Dispatcher.handle (turn, idempotency, pre-flight, quota, reserve, launch)",
        submit_ms=round(statistics.median(submit_s) * 1000, 1),
        pass_ms=round(statistics.median(plain_s) * 1000, 1),
    )
    assert len(submit_s) == len(plain_s) == rounds
    if bench_full:
        assert ratio <= TARGET_SUBMIT_RATIO


def test_job_poll_cost(counted: tuple[Stack, Calls]) -> None:
    stack, log = counted
    # Given a running job, polled once by this container (credentials and clients cached)
    assert stack.dispatch(event(call_id="c0", code="x = 1"))["ok"] is True
    submitted = stack.dispatch(event(call_id="c1", code=SLEEPER, background=True))
    assert stack.dispatch(get_job_event("turn-1", submitted["job_id"], "get_job"))["status"] == "running"
    # When it is polled while running
    before, polls = len(log.calls), 5
    for _ in range(polls):
        assert stack.dispatch(get_job_event("turn-1", submitted["job_id"], "get_job"))["status"] == "running"
    made = log.calls[before:]
    # Then each poll costs at most two AWS calls: the job item and one status call to the session
    per_poll = len(made) / polls
    emit(
        "job_poll_cost",
        target=f"<= {TARGET_POLL_CALLS}",
        ratio=per_poll,
        calls_per_get_job=per_poll,
        by_operation=dict(Counter(made)),
        scope="through Dispatcher.handle",
    )
    stack.dispatch(get_job_event("turn-1", submitted["job_id"], "cancel_job"))
    assert len(made) >= polls  # the hook saw the calls
    assert Counter(made) == {"dynamodb:GetItem": polls, "bedrock-agentcore:InvokeCodeInterpreter": polls}
    assert per_poll <= TARGET_POLL_CALLS
