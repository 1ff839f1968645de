"""The collect stage: the artifacts a call's code left — new or changed `outputs/` files and open
figures — collected from its session as the line unwinds from the session stage (after the code,
after its session was confirmed the turn's), redacted and stored; nothing after a timeout (the
session was stopped), and a collection problem never fails the call (logged, its result stands).
"""

from __future__ import annotations

from sandbox_common.observability import logger

from dispatch.call import Answer, Call, Next
from dispatch.files.flow import artifacts


def collect(call: Call, then: Next) -> Answer:
    answer = then(call)
    outcome, result = call.outcome, call.result
    if answer is not None or result is None or call.runner is None or call.preflight is None:
        return answer  # answered directly (nothing ran to its end yet), or no session left to read
    bucket = call.parts.settings.artifacts_bucket
    if result.exit_status == "timeout" or not bucket:
        outcome.response_extra["files"] = []
        outcome.audit_extra["artifacts"] = []
        return None
    req = call.request
    collected = artifacts(bucket).collect(
        call.runner.files,
        str(call.preflight.interpreter_id),
        str(outcome.session_id),
        tenant_id=req.tenant_id,
        turn_id=req.turn_id,
        invocation_id=call.invocation_id,
    )
    outcome.response_extra["files"] = collected.files
    outcome.audit_extra["artifacts"] = collected.artifacts
    if collected.failure_reason:
        logger.warning(
            "artifact_collection_failed",
            extra={"invocation_id": call.invocation_id, "failure_reason": collected.failure_reason},
        )
    return None
