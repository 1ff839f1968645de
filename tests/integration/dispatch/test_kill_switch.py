"""The kill switch reaches admitted work through dispatch, on the shared real-parts
stack: once a call cap is 0 for the tenant (its override, or the stage-wide value) or the tenant is
disabled, a `resume` of a paused tool-calling call is refused — the call ends with its one row and
nothing is counted again — and a running background job is cancelled at its next get_job with
`reason: "kill_switch"` and its one row.

Each test throws the switch and then starts dispatch over as a fresh container: what every
container sees once its cached caps and policy expire (≤ 60 s; the expiry itself is pinned in
tests/unit/runtime/test_kill_switch.py)."""

from __future__ import annotations

from typing import Any

import pytest
from sandbox_common import dimensions, messages
from sandbox_common import naming as n

from tests.support.stack import KILLS, get_job_event, kill, put_tools_template

from .conftest import Stack, event

TOOLS_TEMPLATE = "tools-analyst"
PAUSE = "from sandbox_tools import tools\nprint('before')\nv = tools.lookup(k=1)\nprint('after', v)\n"
SLEEPER = "import time\ntime.sleep(120)\nprint('never')"


def _fresh_container() -> None:
    from dispatch import parts as dependencies

    dependencies.reset()


def _daily_count(stack: Stack) -> int:
    items = stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical]
    return sum(int(i[n.COUNTER_ATTR_COUNT]["N"]) for i in items)


def _rows(stack: Stack, call_id: str) -> list[dict[str, Any]]:
    return [r for r in stack.audit_rows("acme") if r["call_id"] == call_id]


def _resume(paused: dict[str, Any], **answer: Any) -> dict[str, Any]:
    out = event("resume", continuation=paused["continuation"], **answer)
    out.pop("template_id", None)
    return out


def _expect_refusal(answer: dict[str, Any], how: str) -> None:
    """The refusal a new call of a killed tenant gets: the cap's, or the disabled tenant's."""
    if how == "tenant_disabled":
        assert (answer["error"], answer["reason"]) == ("SandboxProvisioning", "tenant_disabled"), answer
    else:
        dimension = dimensions.TENANT_DAILY.name if how.startswith("tenant_daily") else "agent_hourly"
        assert (answer["error"], answer["dimension"]) == ("SandboxCapExceeded", dimension), answer
        assert answer["resets_at"].endswith("Z")


def _why(how: str) -> str:
    return {
        "tenant_daily_override": "tenant_daily",
        "agent_hourly_global": "agent_hourly",
        "tenant_disabled": "tenant_disabled",
    }[how]


@pytest.mark.parametrize("how", KILLS)
def test_kill_switch_refuses_a_resume_and_ends_the_paused_call_with_one_row(stack: Stack, how: str) -> None:
    # Given a tool-calling call paused at its tool call (counted once, no row yet)
    put_tools_template(stack, TOOLS_TEMPLATE, ["lookup"])
    paused = stack.dispatch(event(template_id=TOOLS_TEMPLATE, code=PAUSE, call_id="c-kill"))
    assert paused["status"] == n.STATUS_TOOL_CALL, paused
    counted, markers = _daily_count(stack), stack.markers()
    assert _rows(stack, "c-kill") == []
    # When the kill switch is thrown for the tenant, and the agent resumes once it took effect
    kill(stack, how)
    _fresh_container()
    answer = stack.dispatch(_resume(paused, tool_result=7))
    # Then the resume is refused as a new call would be, under the paused call's invocation id,
    # and the code never ran on past its tool call
    _expect_refusal(answer, how)
    assert answer["ok"] is False and answer["invocation_id"] == paused["invocation_id"]
    assert answer["stdout"] == "before\n"
    # and the call ended with exactly one row, saying why
    (row,) = _rows(stack, "c-kill")
    assert row["invocation_id"] == paused["invocation_id"]
    assert row["error"] == answer["error"]
    assert row["failure_reason"] == f"{n.FIELD_KILL_SWITCH}:{_why(how)}"
    assert row["tool_calls"] == 1
    # and nothing was counted again
    assert (_daily_count(stack), stack.markers()) == (counted, markers)
    # and the paused session was stopped (the parked code never runs on)
    assert paused["session_id"] not in stack.live_sessions()
    # And a second resume gets the ended call's answer again: no second row, nothing counted
    again = stack.dispatch(_resume(paused, tool_result=7))
    assert (again["error"], again["invocation_id"]) == (answer["error"], paused["invocation_id"])
    assert len(_rows(stack, "c-kill")) == 1
    assert (_daily_count(stack), stack.markers()) == (counted, markers)


def test_kill_switch_leaves_a_resume_alone_while_the_caps_are_above_zero(stack: Stack) -> None:
    # Given a paused call, and the tenant's daily cap lowered but not to 0
    put_tools_template(stack, TOOLS_TEMPLATE, ["lookup"])
    paused = stack.dispatch(event(template_id=TOOLS_TEMPLATE, code=PAUSE, call_id="c-alive"))
    assert paused["status"] == n.STATUS_TOOL_CALL, paused
    stack.set_cap(dimensions.TENANT_DAILY.name, 1, "acme")
    _fresh_container()
    # When the agent resumes
    answer = stack.dispatch(_resume(paused, tool_result=7))
    # Then the call runs to its end (already counted: a cap at its count does not stop it)
    assert (answer["ok"], answer["stdout"]) == (True, "before\nafter 7\n"), answer
    assert [r["exit_status"] for r in _rows(stack, "c-alive")] == ["ok"]


@pytest.mark.parametrize("how", ["tenant_daily_override", "tenant_disabled"])
def test_kill_switch_cancels_a_running_job_at_its_next_get_job_with_one_row(stack: Stack, how: str) -> None:
    # Given a background job that runs for two minutes (counted once at submit)
    submitted = stack.dispatch(event(call_id="c-job", code=SLEEPER, background=True))
    assert submitted["status"] == "running", submitted
    assert stack.dispatch(get_job_event("turn-1", submitted["job_id"]))["status"] == "running"
    counted = _daily_count(stack)
    # When the kill switch is thrown for the tenant and the agent polls the job once it took effect
    kill(stack, how)
    _fresh_container()
    answer = stack.dispatch(get_job_event("turn-1", submitted["job_id"]))
    # Then the job is cancelled by the kill switch: status cancelled, reason kill_switch, and the
    # refusal a new call would get
    assert (answer["status"], answer["reason"], answer["ok"]) == ("cancelled", n.FIELD_KILL_SWITCH, False)
    if how == "tenant_disabled":
        assert answer["error"] == "SandboxProvisioning"
        assert answer["error_message"] == messages.job_killed(messages.TENANT_DISABLED)
    else:
        assert (answer["error"], answer["dimension"]) == ("SandboxCapExceeded", "tenant_daily")
    # and exactly one row, under the submit's invocation id
    (row,) = [r for r in stack.audit_rows("acme") if r["invocation_id"] == submitted["invocation_id"]]
    assert (row["job_status"], row["failure_reason"]) == ("cancelled", f"{n.FIELD_KILL_SWITCH}:{_why(how)}")
    # and nothing counted again
    assert _daily_count(stack) == counted
    # And later polls answer the same end without another row
    again = stack.dispatch(get_job_event("turn-1", submitted["job_id"]))
    assert (again["status"], again["reason"]) == ("cancelled", n.FIELD_KILL_SWITCH)
    assert len([r for r in stack.audit_rows("acme") if r["invocation_id"] == submitted["invocation_id"]]) == 1


def test_kill_switch_refused_resume_cancels_the_turns_jobs_before_stopping_its_session(stack: Stack) -> None:
    # Given a turn with a running background job and a paused tool-calling call in its session
    put_tools_template(stack, TOOLS_TEMPLATE, ["lookup"])
    submitted = stack.dispatch(event(call_id="c-bg", code=SLEEPER, background=True))
    assert submitted["status"] == "running", submitted
    paused = stack.dispatch(event(template_id=TOOLS_TEMPLATE, code=PAUSE, call_id="c-paused"))
    assert paused["status"] == n.STATUS_TOOL_CALL, paused
    assert paused["session_id"] == submitted["session_id"]
    # When the tenant is disabled and the agent resumes
    kill(stack, "tenant_disabled")
    _fresh_container()
    answer = stack.dispatch(_resume(paused, tool_result=1))
    # Then the resume is refused, the job was cancelled by the kill switch (one row), and only
    # then was the session stopped
    _expect_refusal(answer, "tenant_disabled")
    (job_row,) = [r for r in stack.audit_rows("acme") if r["invocation_id"] == submitted["invocation_id"]]
    assert (job_row["job_status"], job_row["failure_reason"]) == (
        "cancelled",
        f"{n.FIELD_KILL_SWITCH}:tenant_disabled",
    )
    assert len(_rows(stack, "c-paused")) == 1
    assert paused["session_id"] not in stack.live_sessions()
