"""The reaper under the kill switch and the warm-pool refill, with real parts:
on its period the reaper cancels the running jobs of a killed tenant (`reason: "kill_switch"`,
one row each) and stops a disabled tenant's warm sessions (slots freed, not refilled); a refill
of one tenant's pool never touches another tenant's warm sessions."""

from __future__ import annotations

from typing import Any

import pytest
from sandbox_common import naming as n

from tests.conftest import LambdaContext
from tests.support.stack import kill

from .conftest import Stack, event, get_job_event, set_warm, slots_of

SLEEPER = "import time\ntime.sleep(120)\nprint('never')"


def _reap(event_: dict[str, Any] | None = None) -> dict[str, Any]:
    from reaper.handler import handler

    out = handler(event_ or {"source": "aws.events", "detail-type": "Scheduled Event"}, LambdaContext())
    assert out["ok"] is True, out
    return out


def _refill_event(tenant_id: str) -> dict[str, Any]:
    return {"refill": {"tenant_id": tenant_id, "environment": "default-public"}}


def _warm(stack: Stack, tenant_id: str) -> list[str]:
    return sorted(s.session_id for s in slots_of(stack) if s.tenant_id == tenant_id and s.state == "warm")


def _running(stack: Stack, session_id: str) -> bool:
    session = stack.interpreter.session(session_id)
    return session is not None and session.status == "READY"


@pytest.mark.parametrize("how", ["agent_hourly_global", "tenant_disabled"])
def test_reaper_cancels_a_killed_tenants_running_job_with_one_row(reaper_stack: Stack, how: str) -> None:
    from reaper import service

    stack = reaper_stack
    # Given a background job of acme that runs for two minutes, and nobody polling it
    submitted = stack.dispatch(event(turn_id="turn-kj", call_id="c-kj", code=SLEEPER, background=True))
    assert submitted["status"] == "running", submitted
    assert _reap()["hooks"][n.REAPER_HOOK_JOBS]["ended"] == 0  # running, and acme not killed
    # When the kill switch is thrown and the reaper runs once it took effect (a fresh container)
    kill(stack, how)
    service.reset()
    summary = _reap()
    # Then the job was cancelled by the kill switch, with exactly one row
    assert summary["hooks"][n.REAPER_HOOK_JOBS] == {"ok": True, "ended": 1, "by_status": {"cancelled": 1}}
    (row,) = [r for r in stack.audit_rows("acme") if r["invocation_id"] == submitted["invocation_id"]]
    why = "tenant_disabled" if how == "tenant_disabled" else "agent_hourly"
    assert (row["job_status"], row["failure_reason"]) == ("cancelled", f"{n.FIELD_KILL_SWITCH}:{why}")
    # And the agent's next get_job answers that end; a second reaper run adds nothing
    answer = stack.dispatch(get_job_event("turn-kj", submitted["job_id"]))
    assert (answer["status"], answer["reason"]) == ("cancelled", n.FIELD_KILL_SWITCH)
    assert _reap()["hooks"][n.REAPER_HOOK_JOBS]["ended"] == 0
    assert len([r for r in stack.audit_rows("acme") if r["invocation_id"] == submitted["invocation_id"]]) == 1


def test_reaper_stops_a_disabled_tenants_warm_sessions_and_keeps_the_others(reaper_stack: Stack) -> None:
    from reaper import service

    stack = reaper_stack
    # Given one warm session for acme and one for globex
    set_warm("acme", "default-public", 1)
    set_warm("globex", "default-public", 1)
    assert _reap()["refill"]["started"] == 2
    (acme,), (globex,) = _warm(stack, "acme"), _warm(stack, "globex")
    # When acme is disabled and the reaper runs once it took effect
    kill(stack, "tenant_disabled")
    service.reset()
    summary = _reap()
    # Then acme's warm session is stopped, its slot freed, and none started in its place
    assert summary["refill"]["trimmed"] == 1 and summary["refill"]["started"] == 0
    assert not _running(stack, acme)
    assert [s for s in slots_of(stack) if s.tenant_id == "acme"] == []
    # and globex's warm session is untouched
    assert _warm(stack, "globex") == [globex] and _running(stack, globex)


def test_refill_of_one_tenants_pool_never_stops_another_tenants_warm_sessions(reaper_stack: Stack) -> None:
    stack = reaper_stack
    # Given a warm session for acme and one for globex
    set_warm("acme", "default-public", 1)
    set_warm("globex", "default-public", 1)
    assert _reap()["refill"]["started"] == 2
    (acme,), (globex,) = _warm(stack, "acme"), _warm(stack, "globex")
    # When acme's pool is resized to 2 and a refill of acme's pool alone runs
    set_warm("acme", "default-public", 2)
    acme_refill = _reap(_refill_event("acme"))
    # Then acme gets its second warm session and globex's is untouched
    assert acme_refill["refill"] == {"started": 1, "failed": 0, "trimmed": 0, "refused": {}}
    assert len(_warm(stack, "acme")) == 2 and acme in _warm(stack, "acme")
    assert _warm(stack, "globex") == [globex] and _running(stack, globex)
    # And the other way round: a refill of globex's pool leaves acme's two warm sessions running
    globex_refill = _reap(_refill_event("globex"))
    assert globex_refill["refill"]["trimmed"] == 0
    assert len(_warm(stack, "acme")) == 2 and all(_running(stack, s) for s in _warm(stack, "acme"))


def _ssm_change(parameter: str) -> dict[str, Any]:
    """An EventBridge `Parameter Store Change` event, as SSM sends it for a caps parameter."""
    return {
        "version": "0",
        "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
        "detail-type": "Parameter Store Change",
        "source": "aws.ssm",
        "account": "123456789012",
        "time": "2026-11-21T08:15:00Z",
        "region": "us-east-1",
        "resources": [f"arn:aws:ssm:us-east-1:123456789012:parameter{parameter}"],
        "detail": {"operation": "Update", "name": parameter, "type": "String"},
    }


def _policy_record(tenant_id: str) -> dict[str, Any]:
    """The tenants table's stream batch of one write of the tenant's policy item (keys only)."""
    return {
        "Records": [
            {
                "eventID": "1",
                "eventName": "MODIFY",
                "eventSource": "aws:dynamodb",
                "awsRegion": "us-east-1",
                "dynamodb": {
                    "Keys": {n.TENANTS.pk: {"S": tenant_id}, n.TENANTS.sort_key: {"S": n.TENANT_POLICY_ITEM}},
                    "SequenceNumber": "111",
                    "SizeBytes": 26,
                    "StreamViewType": "KEYS_ONLY",
                },
            }
        ]
    }


def _announce(how: str) -> dict[str, Any]:
    from sandbox_common import dimensions

    if how == "tenant_daily_override":
        return _ssm_change(dimensions.parameter("local", dimensions.TENANT_DAILY.name, "acme"))
    if how == "agent_hourly_global":
        return _ssm_change(dimensions.parameter("local", dimensions.AGENT_HOURLY.name))
    return _policy_record("acme")


@pytest.mark.parametrize(
    ("how", "sent"),
    [
        ("tenant_daily_override", "sandboxctl"),
        ("tenant_disabled", "sandboxctl"),
        ("tenant_daily_override", "aws"),
        ("agent_hourly_global", "aws"),
        ("tenant_disabled", "aws"),
    ],
)
def test_kill_switch_run_cancels_a_running_job_at_once_on_the_change_event(
    reaper_stack: Stack, how: str, sent: str
) -> None:
    stack = reaper_stack
    # Given a running job of acme, and a reaper container that already read acme as not killed
    submitted = stack.dispatch(event(turn_id="turn-ke", call_id="c-ke", code=SLEEPER, background=True))
    assert submitted["status"] == "running", submitted
    assert _reap()["hooks"][n.REAPER_HOOK_JOBS]["ended"] == 0
    # When the kill switch is thrown and the change is announced to that same container (no
    # scheduled run, no get_job): by sandboxctl's event, or by AWS's (a caps parameter's
    # EventBridge event, the tenants table's stream)
    kill(stack, how)
    tenant_scope = {} if how == "agent_hourly_global" else {"tenant_id": "acme"}
    announced = {n.KILL_SWITCH_EVENT_KEY: tenant_scope} if sent == "sandboxctl" else _announce(how)
    summary = _reap(announced)[n.KILL_SWITCH_EVENT_KEY]
    # Then the kill switch was read afresh and the job cancelled by it, with one row
    assert (summary["killed"], summary["by_status"]) == (["acme"], {"cancelled": 1}), summary
    (row,) = [r for r in stack.audit_rows("acme") if r["invocation_id"] == submitted["invocation_id"]]
    assert row["job_status"] == "cancelled" and row["failure_reason"].startswith(n.FIELD_KILL_SWITCH)
    answer = stack.dispatch(get_job_event("turn-ke", submitted["job_id"]))
    assert (answer["status"], answer["reason"]) == ("cancelled", n.FIELD_KILL_SWITCH)


def test_kill_switch_run_leaves_work_alone_when_the_change_did_not_kill(reaper_stack: Stack) -> None:
    from sandbox_common import dimensions

    stack = reaper_stack
    # Given a running job of acme
    submitted = stack.dispatch(event(turn_id="turn-kn", call_id="c-kn", code=SLEEPER, background=True))
    assert submitted["status"] == "running", submitted
    # When a cap is raised (a change, announced, that kills nothing)
    stack.set_cap(dimensions.TENANT_DAILY.name, 5000, "acme")
    summary = _reap(_announce("tenant_daily_override"))[n.KILL_SWITCH_EVENT_KEY]
    # Then nothing was ended and the job still runs
    assert (summary["killed"], summary["ended"]) == ([], 0)
    assert stack.dispatch(get_job_event("turn-kn", submitted["job_id"]))["status"] == "running"
    stack.dispatch(get_job_event("turn-kn", submitted["job_id"], action="cancel_job"))


@pytest.mark.parametrize(
    "hostile",
    [
        {n.KILL_SWITCH_EVENT_KEY: {"tenant_id": "../acme"}},
        {"source": "aws.ssm", "detail-type": "Parameter Store Change", "detail": {"name": "/etc/passwd"}},
        {"source": "aws.ssm", "detail-type": "Parameter Store Change", "detail": {"name": 7}},
        {"Records": [{"eventSource": "aws:dynamodb", "dynamodb": {"Keys": {"tenant_id": {"S": "a/../b"}}}}]},
        {"Records": []},
    ],
)
def test_kill_switch_run_refuses_an_event_that_names_no_tenant(reaper_stack: Stack, hostile: dict) -> None:
    from reaper.handler import handler

    # Given an event shaped like a change announcement that names nothing a tenant id may be
    # When the reaper gets it / Then it refuses it as invalid and runs nothing
    assert handler(hostile, LambdaContext()) == {"ok": False, "error": "SandboxInvalidRequest"}
