"""get_job and cancel_job (`observe`). A background job's submit is a line of stages
(`dispatch.line.SUBMIT`, `dispatch.jobs.stage`); the job logic itself is `dispatch.jobs.actions`
and the shared run time's job end (`sandbox_runtime.job_end`)."""

from __future__ import annotations

from typing import Any

from sandbox_common import messages
from sandbox_common.errors import SandboxError, SandboxFailure, SandboxInvalidRequest
from sandbox_common.models import CancelJobRequest, GetJobRequest
from sandbox_common.outcome import internal_failure, public
from sandbox_runtime.job_store import JobRecord

from dispatch import guard
from dispatch.idempotency.store import Context
from dispatch.jobs import actions
from dispatch.parts import Parts, built
from dispatch.turns.store import TurnStoreUnavailable


def observe(req: GetJobRequest | CancelJobRequest, context: Context | None) -> dict[str, Any]:
    """get_job / cancel_job: the job must be the caller's (another tenant's, agent's or turn's job
    is refused like an unknown id; an ended turn's jobs still answer: they outlive end_turn) and
    the turn token must be its turn's, checked against the hash kept on the job item — a turn's
    hash never changes once bound, so this is the turn's own check without reading the turn: a
    running job's poll costs the job read plus one status call to its session."""
    parts = built()
    deps = parts.jobs
    try:
        record = actions.owned(req, deps)
        check_token(parts, req, record)
        return actions.answer(record, deps, cancel=isinstance(req, CancelJobRequest))
    except SandboxInvalidRequest:
        raise
    except SandboxFailure as failure:
        internal_failure(str(failure.fields.get("failure_reason")))
        return public(failure)


def check_token(parts: Parts, req: GetJobRequest | CancelJobRequest, record: JobRecord) -> None:
    stored = record.turn_token_hash
    if stored is None:  # a job item from before the hash was kept on it: its turn says
        try:
            turn = parts.turns.get(req.tenant_id, req.turn_id)
        except TurnStoreUnavailable as exc:
            raise SandboxError(messages.INTERNAL, failure_reason=f"turn_store_unavailable:{exc}") from None
        if turn is None:
            raise SandboxInvalidRequest(actions.UNKNOWN_JOB)
        stored = turn.token_hash
    guard.check(
        token=req.turn_token,
        stored_hash=stored,
        required=parts.settings.require_turn_token,
        tenant_id=req.tenant_id,
        agent_id=req.agent_id,
        turn_id=req.turn_id,
    )
