"""The agent's tenant scope, checked where a request's tenant is first known: before its route runs.

An agent principal scoped to tenants invokes dispatch through the per-tenant aliases it was
granted; the scope comes from the ARN Lambda reports (`context.invoked_function_arn`), never from
the event (`sandbox_common.agent_scope`). A request for a tenant outside the scope is refused with
`SandboxProvisioning` (reason `tenant_out_of_scope`) before anything is counted, run or written:
an `execute_code` still gets its one audit row (the row of a refused call), other actions an
answer only. Internal actions without a tenant are refused through any scoped alias.
"""

from __future__ import annotations

from typing import Any

from sandbox_common import messages
from sandbox_common import naming as n
from sandbox_common.agent_scope import scope_of
from sandbox_common.errors import SandboxProvisioning
from sandbox_common.models import AnyDispatchRequest, ExecuteCodeRequest
from sandbox_common.observability import logger


def refusal(request: AnyDispatchRequest, context: object) -> dict[str, Any] | None:
    """None when the call is within the agent's scope; else the refusal's answer."""
    scope = scope_of(getattr(context, "invoked_function_arn", None))
    tenant_id = getattr(request, "tenant_id", None)
    if scope.allows(tenant_id):
        return None
    logger.warning(
        n.REASON_OUT_OF_SCOPE,
        extra={"tenant_id": tenant_id, "qualifier": scope.qualifier, "action": str(request.action)},
    )
    failure = SandboxProvisioning(
        messages.OUT_OF_SCOPE, reason=n.REASON_OUT_OF_SCOPE, failure_reason=n.REASON_OUT_OF_SCOPE
    )
    if isinstance(request, ExecuteCodeRequest):
        # Cold start: the call's parts load with the first call that is refused here or runs.
        from dispatch.idempotency.stage import refuse
        from dispatch.parts import built

        return refuse(built(), request, failure)  # nothing counted or run; the call's one row
    if request.action == n.Action.BEGIN_TURN:
        sandbox = {
            "status": "disabled",
            "error": "SandboxProvisioning",
            "reason": n.REASON_OUT_OF_SCOPE,
            "error_message": messages.OUT_OF_SCOPE,
        }
        return {"ok": True, "sandbox": sandbox}
    answer = failure.to_response()
    answer.pop("failure_reason", None)  # the technical reason stays in the log line
    return answer
