"""SPEC §14 in the execute_code flow: the three call sites dispatch's logic needs, in order.

1. `check_inputs(request, data_read)` — with the other input checks, BEFORE quota: a bad
   s3_uri is a SandboxInvalidRequest, nothing counted, no session.
2. `place_inputs(runner, interpreter_id, session_id, request)` — after the session is there,
   BEFORE the user code: writes the files; on failure the code must not run (SandboxError,
   failure_reason `inputs:...`). Returns the audit row's `input_files`.
3. `collect(runner, interpreter_id, session_id, ctx, exit_status)` — AFTER the user code, for
   any outcome but `timeout` (the session is stopped then). Returns response `files` and audit
   `artifacts`; never raises for a collection problem (the call's own result stands).
"""

from __future__ import annotations

from typing import Any

from sandbox_common.errors import SandboxError
from sandbox_common.files import check_s3_inputs
from sandbox_common.models import ExecuteCodeRequest
from sandbox_runtime.artifacts import (
    ArtifactContext,
    ArtifactStore,
    CollectResult,
    collect_and_store,
    s3_client,
)

from dispatch.files.inputs import InputsFailed, write_inputs

INPUTS_FAILED_MESSAGE = (
    "The input files could not be placed in the sandbox, so no code was run; please check them and try again."
)


def check_inputs(request: ExecuteCodeRequest, data_read: tuple[str, ...]) -> None:
    check_s3_inputs(request.files, data_read)


def place_inputs(
    runner: Any, interpreter_id: str, session_id: str, request: ExecuteCodeRequest
) -> list[dict[str, Any]]:
    try:
        return write_inputs(runner.files, interpreter_id, session_id, request.files)
    except InputsFailed as exc:
        raise SandboxError(INPUTS_FAILED_MESSAGE, failure_reason=exc.reason) from None


def collect(
    runner: Any, interpreter_id: str, session_id: str, ctx: ArtifactContext, exit_status: str, s3: Any = None
) -> CollectResult | None:
    """None after a timeout (nothing is collected); else the collection's result."""
    if exit_status == "timeout" or not ctx.bucket:
        return None
    return collect_and_store(runner.files, interpreter_id, session_id, ctx, ArtifactStore(s3 or s3_client()))
