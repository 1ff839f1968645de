"""Benchmark `kill_switch_reach`: from a cap set to 0 to a running background job
cancelled and a paused tool-calling call refused — on the shared real-parts harness (the dispatch
handler and the reaper in-process with their CDK environments, moto, the quota Lambda in the local
Lambda emulator, real sessions of the local interpreter).

Measured from the moment the tenant's `tenant_daily` override is written as 0:
- `job_cancelled_s`: until the running job ended as cancelled (`kill_switch`; the job's end as its
  row records it), with nothing else happening in the tenant: no get_job, no call, no scheduled
  reaper run. The change is announced to the reaper as `sandboxctl caps set` announces it (its
  kill-switch event; on AWS a caps parameter's EventBridge event does the same), to a reaper
  container whose kill-switch cache already said "not killed": the run reads the kill switch
  afresh and cancels the job (`announce_s`: the time until the announcement was sent, here at
  once). No reaper period is in this figure; `reaper_run_s` is the announced run's own time.
- `seen_s`: until a warm dispatch container's kill switch sees it (its cached caps expire: at
  most `limits.KILL_SWITCH_CACHE_SECONDS`). With `--bench-full` the container is warm and the wait
  is real (up to the TTL); in the quick smoke the container starts cold, so this is only the read.
- `resume_s`: the agent's `resume` of the paused call, refused (SandboxCapExceeded) with its row.
The paused call's reach is `seen_s + resume_s`.
Target: the job's reach ≤ 60 s (ratio = job_cancelled_s ÷ 60 ≤ 1).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from sandbox_common import dimensions
from sandbox_common import naming as n

from tests.benchmarks._report import emit
from tests.conftest import LambdaContext
from tests.support import stack as harness
from tests.support.stack import Stack, event, put_tools_template

pytestmark = pytest.mark.bench

interpreter = harness.interpreter
stack = harness.stack
reaper_stack = harness.reaper_stack

TEMPLATE = "tools-bench"
PAUSE = "from sandbox_tools import tools\nv = tools.lookup(k=1)\nprint(v)\n"
SLEEPER = "import time\ntime.sleep(600)"
REACH_TARGET_S = 60  # the kill switch reaches a running job within 60 s


def _reap(event_: dict[str, Any] | None = None) -> dict[str, Any]:
    from reaper.handler import handler

    out = handler(event_ or {"source": "aws.events", "detail-type": "Scheduled Event"}, LambdaContext())
    assert out["ok"] is True, out
    return out


def test_kill_switch_reach(reaper_stack: Stack, bench_full: bool) -> None:
    from dispatch import parts as dependencies

    stack = reaper_stack
    # Given a running background job of one turn of acme and a paused tool-calling call of another
    # (a refused resume cancels its own turn's jobs itself), a dispatch container that has already
    # read acme's caps and policy (its caches warm), and a reaper container that has too (its
    # scheduled run found acme not killed)
    put_tools_template(stack, TEMPLATE, ["lookup"])
    job = stack.dispatch(event(turn_id="turn-bg", call_id="bg", code=SLEEPER, background=True))
    assert job["status"] == "running", job
    paused = stack.dispatch(event(template_id=TEMPLATE, call_id="paused", code=PAUSE))
    assert paused["status"] == n.STATUS_TOOL_CALL, paused
    assert dependencies.built().kill_switch.check("acme") is None
    assert _reap()["hooks"][n.REAPER_HOOK_JOBS]["ended"] == 0
    ttl_s = dependencies.built().kill_switch.caps.ttl  # the kill switch's own cache (≤ 30 s)
    # When the operator sets acme's tenant_daily to 0 (`sandboxctl caps set ... 0` announces it)
    changed_epoch, started = time.time(), time.perf_counter()
    stack.set_cap(dimensions.TENANT_DAILY.name, 0, "acme")
    announce_s = time.perf_counter() - started
    run_started = time.perf_counter()
    summary = _reap({n.KILL_SWITCH_EVENT_KEY: {"tenant_id": "acme"}})[n.KILL_SWITCH_EVENT_KEY]
    reaper_run_s = time.perf_counter() - run_started
    # and the agent resumes the paused call once its dispatch container has seen the change
    if not bench_full:  # the quick smoke does not wait out the cache: a cold container reads at once
        dependencies.reset()
    while dependencies.built().kill_switch.check("acme") is None:
        assert time.perf_counter() - started < ttl_s + 30, "the kill switch was never seen"
        time.sleep(0.25)
    seen_s = time.perf_counter() - started
    resume_started = time.perf_counter()
    refused = stack.dispatch(
        {
            **{k: v for k, v in event("resume").items() if k != "template_id"},
            "continuation": paused["continuation"],
            "tool_result": 1,
        }
    )
    resume_s = time.perf_counter() - resume_started
    # Then the job was cancelled by the kill switch and the call refused, each with one row
    assert (summary["killed"], summary["by_status"]) == (["acme"], {"cancelled": 1}), summary
    assert (refused["error"], refused["dimension"]) == ("SandboxCapExceeded", "tenant_daily"), refused
    rows = {r["invocation_id"]: r for r in stack.audit_rows("acme")}
    assert rows[paused["invocation_id"]]["failure_reason"] == "kill_switch:tenant_daily"
    assert rows[job["invocation_id"]]["failure_reason"] == "kill_switch:tenant_daily"
    ended_at = datetime.strptime(rows[job["invocation_id"]]["finished_at"], "%Y-%m-%dT%H:%M:%S.%fZ")
    job_cancelled_s = ended_at.replace(tzinfo=UTC).timestamp() - changed_epoch
    emit(
        "kill_switch_reach",
        target=f"<= 1 (a running job cancelled <= {REACH_TARGET_S} s after the change, no reaper period)",
        ratio=job_cancelled_s / REACH_TARGET_S,
        job_cancelled_s=round(job_cancelled_s, 2),
        announce_s=round(announce_s, 2),
        reaper_run_s=round(reaper_run_s, 2),
        seen_s=round(seen_s, 2),
        cache_ttl_s=ttl_s,
        warm_container=bench_full,
        resume_refused_s=round(resume_s, 2),
        paused_call_reach_s=round(seen_s + resume_s, 2),
        scope="harness: dispatch and reaper in-process, moto, quota Lambda emulated, local interpreter",
    )
    assert job_cancelled_s <= REACH_TARGET_S
    assert seen_s + resume_s <= REACH_TARGET_S + 30
