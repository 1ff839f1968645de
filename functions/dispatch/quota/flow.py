"""One execute_code's quota check (SPEC §5): sent at t=0 when it can be, joined
where the quota step runs, undone when the call never reaches that step.

Speculative check. Dispatch cannot know whether a call is the first of its turn before reading
the turn, so every eligible execute_code (not background, turn token well formed or absent where
the stage allows it, pre-flight cached and ready) sends its quota check at t=0, beside the
idempotency claim and the turn read. The check is turn-guarded and once-per-call_id (see
sandbox_common.quota_contract.QuotaRequest): the quota Lambda's one transaction counts only if the turn
exists, is this agent's, is not ended and is bound to the request's token hash, and only if this
call_id was not counted before. So a wrong token, an ended or foreign turn counts nothing, and a
retry or a racing duplicate of a call_id never counts twice.

Joining (`decide`, from the quota step `Steps.quota`, after the turn, pre-flight, input and session-cap
checks passed):
- admitted / already counted / cap refused / failed closed: that is the answer;
- turn guard refused (a first call: the turn did not exist yet): the sequential check of before,
  still once-per-call_id, now that the turn exists and every refusal before counting is passed.

Refusals decided after the speculative count. The rule: a speculative count stands iff the call
reaches the quota step (`decide`). `settle()` (the call's `finally`, `Steps.once`) undoes it
otherwise (release: the marker and both counters, one transaction) when the call will not run
under it: the idempotent function ran here and stopped before the quota step (invalid request,
ended turn, disabled tenant, unready template, session cap, a store failure), or the idempotency
store was unreachable (refused, "nothing counted"). It keeps the count when another attempt of
the same call_id ran or runs the call — a replayed answer or StillRunning (logged as
`quota_speculative_kept`): the attempt that ran found this count's marker at its quota step
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
from sandbox_runtime.preflight import PreflightReader

from dispatch import parallel
from dispatch.quota.budget import UsageAccounting
from dispatch.quota.client import CheckQuota, QuotaDecision


class QuotaParts(Protocol):
    """What the quota step uses of the container's parts (dispatch.parts.Parts)."""

    settings: DispatchSettings
    preflight: PreflightReader
    accounting: UsageAccounting
    quota: CheckQuota


class QuotaCheck:
    """The quota of one execute_code. `start` sends it ahead when eligible; `decide` joins it
    (or checks sequentially); `settle` undoes a speculative count the call did not use."""

    def __init__(self, parts: QuotaParts, req: ExecuteCodeRequest, guard: QuotaTurnGuard | None) -> None:
        self._parts = parts
        self._req = req
        self._future: Future[QuotaDecision] | None = None
        self._entered = False  # the idempotent function ran in this invocation
        self._replayed = False  # the answer was a stored one (the function did not run here)
        self._unclaimed = False  # the idempotency store was down: refused, nothing may stay counted
        self._decided = False  # the call reached the quota step: a count stands
        if guard is not None:
            self._future = parallel.start(self._check, guard)

    @classmethod
    def start(cls, parts: QuotaParts, req: ExecuteCodeRequest) -> QuotaCheck:
        return cls(parts, req, _guard_for(parts, req))

    @property
    def speculative(self) -> bool:
        return self._future is not None

    def entered(self) -> QuotaCheck:
        self._entered = True
        return self

    def unclaimed(self) -> None:
        """The idempotency store was unreachable: the call is refused (nothing counted or run)."""
        self._unclaimed = True

    def answered(self) -> None:
        """run_once returned: a replay when the function did not run here."""
        self._replayed = not self._entered

    def decide(self, retries: RetryLog | None = None) -> QuotaDecision:
        self._decided = True
        decision = self._future.result() if self._future is not None else None
        if decision is None or decision.turn_refused:
            decision = self._check(None)
        if retries is not None and decision.retries:
            retries.record_count(n.RETRY_QUOTA_CONFLICT, decision.retries)
        return decision

    def settle(self) -> None:
        """Undo a speculative count the call did not reach (see the module docstring). Never raises."""
        if self._future is None or self._decided:
            return
        try:
            decision = self._future.result()
        except Exception:  # noqa: BLE001 — check_quota never raises; nothing was counted if it did
            return
        if not decision.counted_here:
            return
        if not (self._entered or self._unclaimed):  # replayed / still running: another attempt's count
            logger.warning(
                "quota_speculative_kept",
                extra={"tenant_id": self._req.tenant_id, "call_id": self._req.call_id},
            )
            return
        undone = self._parts.quota(
            self._parts.settings.quota_function_name,
            self._req.tenant_id,
            self._req.agent_id,
            Windows.at(utc_now()),
            counts=False,
            call_id=self._req.call_id,
            release=True,
        )
        logger.info(
            "quota_speculative_released",
            extra={
                "tenant_id": self._req.tenant_id,
                "call_id": self._req.call_id,
                "released": undone.released,
            },
        )

    def _check(self, guard: QuotaTurnGuard | None) -> QuotaDecision:
        req = self._req
        return self._parts.quota(
            self._parts.settings.quota_function_name,
            req.tenant_id,
            req.agent_id,
            Windows.at(utc_now()),
            counts=self._parts.accounting.needs_count(req.tenant_id),
            call_id=req.call_id,
            turn=guard,
        )


def _guard_for(parts: QuotaParts, req: ExecuteCodeRequest) -> QuotaTurnGuard | None:
    """The turn guard of a speculative check, or None when the call is not eligible: background
    jobs, a token the turn check will refuse anyway, a pre-flight that would take a read or is
    not ready (those calls are refused, or their refusal is decided before any count)."""
    if req.background:
        return None
    if req.turn_token is None:
        if parts.settings.require_turn_token:
            return None
        token = ""
    else:
        try:
            token = token_hash(req.turn_token)
        except TurnTokenRejected:
            return None
    pf = parts.preflight.cached(req.tenant_id, req.template_id)
    if pf is None or pf.status != "ready":
        return None
    return QuotaTurnGuard(turn_id=req.turn_id, token_sha256=token)
