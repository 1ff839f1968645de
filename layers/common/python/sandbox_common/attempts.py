"""The attempt an execute_code's idempotency claim carries: what a finisher needs to write the call's
one audit row when its dispatch died, and the sort key of the sparse index of open attempts.

Dispatch writes both into the claim (`dispatch.idempotency.store`); whoever finishes an interrupted
call reads them back (`sandbox_runtime.interrupted`: the first retry past the deadline, or the
reaper's sweep). The attribute names are `naming.IDEMPOTENCY_ATTR_*`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .audit import code_hash
from .models import ExecuteCodeRequest
from .windows import iso_z_ms

# Request fields kept in the attempt (never the turn token, never the code itself).
IDENTITY_FIELDS = (
    "tenant_id",
    "agent_id",
    "user_id",
    "template_id",
    "turn_id",
    "call_id",
    "invocation_source",
    "language",
)


def attempt_fields(request: ExecuteCodeRequest, invocation_id: str, started_at: datetime) -> dict[str, Any]:
    """The call's audit identity, stored with its idempotency claim."""
    return {
        **{k: getattr(request, k) for k in IDENTITY_FIELDS},
        "invocation_id": invocation_id,
        "started_at": iso_z_ms(started_at),
        "executed_code_hash": code_hash(request.code),
        # a background submit's job (if it was created) owns the call's row
        "background": bool(getattr(request, "background", False)),
    }


def deadline_key(deadline_ms: int) -> str:
    """The open-attempt index's sort key (index keys are strings): the in-progress deadline in
    epoch ms, zero-padded, so text order is time order."""
    return f"{deadline_ms:015d}"
