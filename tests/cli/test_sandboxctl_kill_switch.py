"""The kill switch reaches a running background job within 60 s when nothing else happens in its
tenant: `sandboxctl caps set ... 0` and `sandboxctl tenant disable` ask the stage's reaper to stop
the tenant's admitted work at once, through the real CLI and the local stack (its reaper's
schedule kept out of the way: a day, so no scheduled run can be what ends the job), and nobody
polls the job."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sandbox_common import dimensions
from sandbox_common import naming as n

from tests.support.local_stack import ctl_json, running_stack
from tests.support.stack import turn_token_for

REACH_TARGET_S = 60  # the spec's bound: the kill switch reaches a running job within 60 s
SLEEPER = "import time\ntime.sleep(600)"


@pytest.fixture(scope="module")
def quiet_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The local stack with its reaper's schedule a day away."""
    with running_stack(
        tmp_path_factory.mktemp("kill-switch-stack"), USER="op-alice", SANDBOX_LOCAL_REAPER_SECONDS="86400"
    ) as env:
        yield env


def _submit(env: dict[str, str], tenant: str) -> dict[str, Any]:
    turn = f"turn-{uuid.uuid4().hex[:8]}"
    submitted = ctl_json(
        env,
        "invoke",
        json.dumps(
            {
                "action": "execute_code",
                "tenant_id": tenant,
                "agent_id": "agent-kill",
                "template_id": "analyst",
                "turn_id": turn,
                "turn_token": turn_token_for(tenant, turn),
                "call_id": "bg",
                "code": SLEEPER,
                "background": True,
            }
        ),
    )
    assert submitted["status"] == "running", submitted
    return dict(submitted)


def _wait_status(env: dict[str, str], tenant: str, job_id: str, status: str, limit_s: float = 180) -> None:
    """Until `jobs list` (a read of the jobs table: it observes nothing) shows the job's status."""
    deadline = time.monotonic() + limit_s
    while True:
        rows = {r["job_id"]: r for r in ctl_json(env, "jobs", "list", "--tenant", tenant)}
        if rows[job_id]["status"] == status:
            return
        assert time.monotonic() < deadline, rows[job_id]
        time.sleep(1.0)


def _row(env: dict[str, str], tenant: str, invocation_id: str) -> dict[str, Any]:
    (row,) = [
        r for r in ctl_json(env, "audit", "list", "--tenant", tenant) if r["invocation_id"] == invocation_id
    ]
    return dict(row)


def _seconds_after(finished_at: str, moment: float) -> float:
    return datetime.strptime(finished_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp() - moment


def test_kill_switch_cap_zero_cancels_a_running_job_within_60_s_with_nothing_else_happening(
    quiet_stack: dict[str, str],
) -> None:
    env = quiet_stack
    # Given a running background job of acme that nobody polls
    job = _submit(env, "acme")
    # When the operator sets acme's daily cap to 0
    changed_at = time.time()
    out = ctl_json(env, "caps", "set", dimensions.TENANT_DAILY.name, "0", "--tenant", "acme")
    # Then the command asked the reaper at once, and the job ends cancelled by the kill switch,
    # within 60 s of the change, with its one row
    assert out[n.KILL_SWITCH_EVENT_KEY] == "started"
    _wait_status(env, "acme", job["job_id"], "cancelled")
    row = _row(env, "acme", job["invocation_id"])
    assert row["failure_reason"] == f"{n.FIELD_KILL_SWITCH}:{dimensions.TENANT_DAILY.name}"
    assert _seconds_after(row["finished_at"], changed_at) <= REACH_TARGET_S
    ctl_json(env, "caps", "unset", dimensions.TENANT_DAILY.name, "--tenant", "acme")


def test_kill_switch_tenant_disable_cancels_a_running_job_within_60_s_and_a_raised_cap_stops_nothing(
    quiet_stack: dict[str, str],
) -> None:
    env = quiet_stack
    # Given a running background job of globex that nobody polls
    job = _submit(env, "globex")
    # When a cap is raised (no kill: nothing is asked of the reaper)
    raised = ctl_json(env, "caps", "set", dimensions.TENANT_DAILY.name, "5000", "--tenant", "globex")
    assert n.KILL_SWITCH_EVENT_KEY not in raised
    # and then the operator disables globex
    changed_at = time.time()
    out = ctl_json(env, "tenant", "disable", "globex")
    # Then the job ends cancelled by the kill switch within 60 s of the disable
    assert out[n.KILL_SWITCH_EVENT_KEY] == "started"
    _wait_status(env, "globex", job["job_id"], "cancelled")
    row = _row(env, "globex", job["invocation_id"])
    assert row["failure_reason"] == f"{n.FIELD_KILL_SWITCH}:tenant_disabled"
    assert _seconds_after(row["finished_at"], changed_at) <= REACH_TARGET_S
    ctl_json(env, "tenant", "enable", "globex")
