"""One execute_code's quota check: sent at t=0 when it can be, joined where the quota stage runs,
undone when the call never reaches that stage.

Speculative check. Dispatch cannot know whether a call is the first of its turn before reading
the turn, so every eligible execute_code (not background, turn token well formed or absent where
the stage allows it, pre-flight cached and ready) sends its quota check at t=0, beside the
idempotency claim and the turn read. The check is turn-guarded and once-per-call_id (see
sandbox_common.quota_contract.QuotaRequest): the quota Lambda's one transaction counts only if the turn
exists, is this agent's, is not ended and is bound to the request's token hash, and only if this
call_id was not counted before. So a wrong token, an ended or foreign turn counts nothing, and a
retry or a racing duplicate of a call_id never counts twice.

Joining (`decide`, from the quota stage `dispatch.quota.stage`, after the turn, pre-flight, input and
session-cap checks passed):
- admitted / already counted / cap refused / failed closed: that is the answer;
- turn guard refused (a first call: the turn did not exist yet): the sequential check of before,
  still once-per-call_id, now that the turn exists and every refusal before counting is passed.

Refusals decided after the speculative count. The rule: a speculative count stands iff the call
reaches the quota stage (`decide`). `settle()` (the idempotency stage's unwinding) undoes it
otherwise (release: the marker and both counters, one transaction) when the call will not run
under it: the idempotent function ran here and stopped before the quota stage (invalid request,
ended turn, disabled tenant, unready template, session cap, a store failure), or the idempotency
store was unreachable (refused, "nothing counted"). It keeps the count when another attempt of
the same call_id ran or runs the call — a replayed answer or StillRunning (logged as
`quota_speculative_kept`): the attempt that ran found this count's marker at its quota stage
("already counted") and ran under it, so releasing it would leave a call that ran uncounted. The
price is the safe direction: a retry of a call that was refused before counting, replayed from
its stored refusal after the refusal's cause went away, stays counted once.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Protocol

from sandbox_common import naming as n
from sandbox_common.models import ExecuteCodeRequest
from sandbox_common.observability import logger
from sandbox_common.quota_contract import QuotaTurnGuard
from sandbox_common.retries import RetryLog
from sandbox_common.settings import DispatchSettings
from sandbox_common.turn_token import TurnTokenRejected, token_hash
from sandbox_common.windows import Windows, utc_now
from sandbox_runtime.preflight import Preflight

from dispatch.quota.budget import UsageAccounting
from dispatch.quota.client import CheckQuota, QuotaDecision

Ahead = Future[QuotaDecision | None]  # the speculative check: None when nothing was sent ahead


class QuotaParts(Protocol):
    """What the quota uses of the container's parts (dispatch.parts.Parts)."""

    settings: DispatchSettings
    accounting: UsageAccounting
    quota: CheckQuota


def guard_for(
    settings: DispatchSettings, req: ExecuteCodeRequest, cached: Preflight | None
) -> QuotaTurnGuard | None:
    """The turn guard of a speculative check, or None when the call is not eligible: background
    jobs, a token the turn check will refuse anyway, a pre-flight that would take a read or is not
    ready (`cached`: the decision cached when the call started; those calls are refused, or their
    refusal is decided before any count)."""
    if req.background:
        return None
    if req.turn_token is None:
        if settings.require_turn_token:
            return None
        token = ""
    else:
        try:
            token = token_hash(req.turn_token)
        except TurnTokenRejected:
            return None
    if cached is None or cached.status != "ready":
        return None
    return QuotaTurnGuard(turn_id=req.turn_id, token_sha256=token)


def speculate(parts: QuotaParts, req: ExecuteCodeRequest, cached: Preflight | None) -> QuotaDecision | None:
    """The speculative check, sent ahead at t=0 (on the pool); None when the call is not eligible."""
    guard = guard_for(parts.settings, req, cached)
    return None if guard is None else check(parts, req, guard)


def check(parts: QuotaParts, req: ExecuteCodeRequest, guard: QuotaTurnGuard | None = None) -> QuotaDecision:
    """The call's check: turn-guarded when sent ahead, sequential otherwise; once per call_id."""
    return parts.quota(
        parts.settings.quota_function_name,
        req.tenant_id,
        req.agent_id,
        Windows.at(utc_now()),
        counts=parts.accounting.needs_count(req.tenant_id),
        call_id=req.call_id,
        turn=guard,
    )


def decide(parts: QuotaParts, req: ExecuteCodeRequest, ahead: Ahead, retries: RetryLog) -> QuotaDecision:
    """The call's quota, at its quota stage: the check sent ahead joined, else (not sent, or its turn
    guard refused: a first call) the sequential check now; conflict retries become visible events."""
    decision = ahead.result()
    if decision is None or decision.turn_refused:
        decision = check(parts, req)
    if decision.retries:
        retries.record_count(n.RETRY_QUOTA_CONFLICT, decision.retries)
    return decision


def settle(
    parts: QuotaParts, req: ExecuteCodeRequest, ahead: Ahead, *, entered: bool, unclaimed: bool
) -> None:
    """Undo a speculative count of a call that never reached its quota stage (see the module
    docstring): `entered`, the idempotent function ran in this invocation; `unclaimed`, the
    idempotency store could not claim the call. Never raises."""
    try:
        decision = ahead.result()
    except Exception:  # noqa: BLE001 — check_quota never raises; nothing was counted if it did
        return
    if decision is None or not decision.counted_here:
        return
    if not (entered or unclaimed):  # replayed / still running: another attempt's count
        logger.warning("quota_speculative_kept", extra={"tenant_id": req.tenant_id, "call_id": req.call_id})
        return
    undone = parts.quota(
        parts.settings.quota_function_name,
        req.tenant_id,
        req.agent_id,
        Windows.at(utc_now()),
        counts=False,
        call_id=req.call_id,
        release=True,
    )
    logger.info(
        "quota_speculative_released",
        extra={"tenant_id": req.tenant_id, "call_id": req.call_id, "released": undone.released},
    )
