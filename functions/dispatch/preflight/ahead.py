"""The pre-flight read sent ahead of a call (on the pool, beside the idempotency claim): the
tenant's decision for the template (cached ≤ 60 s per container, `sandbox_runtime.preflight`),
and for a ready one the tenant's session runner and whether the code runs through the tools
driver — everything the pre-flight stage needs, so that it only judges."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox_common.models import ExecuteCodeRequest
from sandbox_runtime.preflight import Preflight
from sandbox_runtime.runner import SessionRunner

if TYPE_CHECKING:
    from dispatch.parts import Parts


@dataclass(frozen=True)
class Ready:
    preflight: Preflight
    runner: SessionRunner | None = None  # the tenant's runner, when the template is ready
    uses_tools: bool = False  # the code calls the template's tools (through the tools driver)


def read_ahead(parts: Parts, req: ExecuteCodeRequest) -> Ready:
    """Raises what the pre-flight read raises (PreflightUnavailable): the stage reads again."""
    pf = parts.preflight.check(req.tenant_id, req.template_id)
    if pf.status != "ready":
        return Ready(pf)
    return Ready(pf, parts.runners(pf), pf.runs_tools(req.language, req.code))
