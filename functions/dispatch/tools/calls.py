"""Dispatch's side of programmatic tool calling (docs/tool-calling.md): one step of a tool-calling call.

`start_call` runs a tool-calling execute_code's code, `resume_call` answers a `resume`; both
return a `ToolStep`: either the `tool_call` response (the pause stored as a single-use
continuation) or the `Finished` call, which dispatch renders and audits like any execute_code
result plus `tool_calls` and the per-call records. The call's own context (`call`: whatever
dispatch needs for the final answer and audit row — invocation id, call id, template, user,
source, started_at, code hash, environment) travels through the continuation unchanged.

Quota: counted once by dispatch before `start_call`; `resume_call` never counts.
Failure to store a pause fails closed: the session is stopped (the parked code never runs on)
and the call ends SandboxError with its audit row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sandbox_common import naming as n
from sandbox_common.audit import code_hash
from sandbox_common.errors import SandboxError
from sandbox_common.models import ExecuteCodeRequest, ResumeRequest
from sandbox_common.windows import iso_z_ms
from sandbox_runtime.runner.tool_calling import Finished, Paused, ToolCallState, ToolsRunner

from dispatch.tools.store import STORE_UNAVAILABLE, Continuation, ContinuationStore

TOOL_CALL_STATUS = n.STATUS_TOOL_CALL


@dataclass(frozen=True)
class Owner:
    tenant_id: str
    agent_id: str
    turn_id: str


@dataclass(frozen=True)
class ToolStep:
    call: dict[str, Any]
    response: dict[str, Any] | None = None  # the tool_call answer when paused
    finished: Finished | None = None  # the final outcome otherwise

    @property
    def paused(self) -> bool:
        return self.response is not None


def call_context(
    req: ExecuteCodeRequest,
    *,
    invocation_id: str,
    started_at: datetime,
    session_id: str,
    environment: str | None,
) -> dict[str, Any]:
    """What the final audit row of a paused call needs, stored with its continuation: the request
    without its code (the continuation item has a size limit; the audit row needs only the hash)."""
    return {
        # Never the code (hashed below), the inline files (up to 3 MiB: listed in the audit extras
        # instead) or the turn token (dispatch keeps only its hash).
        "request": req.model_dump(exclude={"code", "files", "turn_token"}),
        "executed_code_hash": code_hash(req.code),
        "invocation_id": invocation_id,
        "started_at": iso_z_ms(started_at),
        "session_id": session_id,
        "environment": environment,
    }


def restored_request(call: dict[str, Any]) -> ExecuteCodeRequest:
    """The original request, for the Outcome that renders the final answer and audit row. Its
    code is not kept: the row's `executed_code_hash` comes from `call["executed_code_hash"]`."""
    return ExecuteCodeRequest.model_construct(**call["request"], code="")


def finished_fields(finished: Finished) -> tuple[dict[str, Any], dict[str, Any]]:
    """(response fields, audit fields) a finished tool-calling call adds to the ordinary result."""
    response = {n.AUDIT_TOOL_CALLS: finished.tool_calls}
    audit = {n.AUDIT_TOOL_CALLS: finished.tool_calls, n.AUDIT_TOOL_CALL_RECORDS: finished.records_for_audit()}
    return response, audit


def paused_response(paused: Paused, *, continuation: str, invocation_id: str) -> dict[str, Any]:
    """The `tool_call` answer for a pause."""
    return {
        "ok": True,
        "status": TOOL_CALL_STATUS,
        n.STATUS_TOOL_CALL: paused.tool_call.to_dict(),
        "continuation": continuation,
        "invocation_id": invocation_id,
        "session_id": paused.state.session_id,
    }


def start_call(
    runner: ToolsRunner,
    store: ContinuationStore,
    *,
    owner: Owner,
    call: dict[str, Any],
    interpreter_id: str,
    session_id: str,
    code: str,
    allow: Sequence[str],
    invocation_id: str,
    deadline_seconds: float | None = None,
) -> ToolStep:
    """Run the code; raises what ToolsRunner.execute raises before code runs (SessionGone,
    CrossTenantInterpreter), so dispatch's usual restart-on-gone path applies."""
    outcome = runner.execute(
        interpreter_id,
        session_id,
        code,
        allow=allow,
        call_ref=invocation_id,
        deadline_seconds=deadline_seconds,
    )
    return _step(runner, store, owner, call, outcome, invocation_id)


def claim(store: ContinuationStore, req: ResumeRequest, *, until: float) -> Continuation:
    """Consume the continuation for a resume that dies at `until` (SandboxInvalidRequest for a
    stale, reused or foreign one: nothing runs, nothing is counted or audited; see
    `ContinuationStore.claim` for a retried resume). Split from `resume_call` so dispatch can
    build the tenant's runner from the claimed call's template in between."""
    return store.claim(
        req.continuation, tenant_id=req.tenant_id, agent_id=req.agent_id, turn_id=req.turn_id, until=until
    )


def resume_call(
    runner: ToolsRunner,
    store: ContinuationStore,
    claimed: Continuation,
    req: ResumeRequest,
    *,
    deadline_seconds: float | None = None,
) -> ToolStep:
    owner = Owner(claimed.tenant_id, claimed.agent_id, claimed.turn_id)
    if req.has_result:
        outcome = runner.resume(claimed.state, tool_result=req.tool_result, deadline_seconds=deadline_seconds)
    else:
        outcome = runner.resume(
            claimed.state, tool_error=req.tool_error, has_result=False, deadline_seconds=deadline_seconds
        )
    return _step(
        runner, store, owner, claimed.call, outcome, str(claimed.call.get("invocation_id", "")), claimed
    )


def expire_turn(
    store: ContinuationStore,
    runner_for: Callable[[Continuation], ToolsRunner],
    *,
    tenant_id: str,
    turn_id: str,
    stop_session: bool = True,
) -> list[ToolStep]:
    """End every paused call of a turn as a timeout (end_turn): each gets its audit row.
    `stop_session=False` when the turn's session must outlive end_turn (its background jobs)."""
    steps = []
    for claimed in store.expire_for_turn(tenant_id=tenant_id, turn_id=turn_id):
        finished = runner_for(claimed).expire(claimed.state, turn_ended=True, stop_session=stop_session)
        steps.append(ToolStep(call=claimed.call, finished=finished))
    return steps


def _step(
    runner: ToolsRunner,
    store: ContinuationStore,
    owner: Owner,
    call: dict[str, Any],
    outcome: Paused | Finished,
    invocation_id: str,
    replaces: Continuation | None = None,
) -> ToolStep:
    if isinstance(outcome, Finished):
        return ToolStep(call=call, finished=outcome)
    try:
        token = store.issue(
            tenant_id=owner.tenant_id,
            agent_id=owner.agent_id,
            turn_id=owner.turn_id,
            call=call,
            state=outcome.state,
            wait_seconds=runner.limits.wait_seconds,
            replaces=replaces,
        )
    except SandboxError as exc:
        reason = str(exc.fields.get("failure_reason") or "continuation_store")
        return ToolStep(
            call=call, finished=runner.abort(outcome.state, reason=reason, message=STORE_UNAVAILABLE)
        )
    return ToolStep(
        call=call, response=paused_response(outcome, continuation=token, invocation_id=invocation_id)
    )


__all__ = [
    "TOOL_CALL_STATUS",
    "call_context",
    "restored_request",
    "Owner",
    "ToolCallState",
    "ToolStep",
    "claim",
    "expire_turn",
    "finished_fields",
    "paused_response",
    "resume_call",
    "start_call",
]
