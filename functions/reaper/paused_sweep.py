"""The paused-tool-calls sweep, a reaper hook: a call paused at a tool call
that nobody resumed or ended within its wait bound ends here — SandboxTimeout, its session stopped
and its slot freed, one audit row — instead of waiting for a late resume or end_turn.

The ending itself is dispatch's (`dispatch.tools.flow`, the same code a late resume and end_turn
run: dispatch holds the continuations, the tenants' runner roles, the artifacts bucket and the
audit grants). This hook invokes dispatch with the internal `sweep_paused_calls` action; the
reaper's role may invoke dispatch and nothing more for this. Any caller may send that action: it
ends only calls whose bound already passed and answers `{"ok": true}` (no counts of other
tenants). A resume racing the sweep ends the call once (both claim the continuation with one
conditional write).
"""

from __future__ import annotations

import json
from typing import Any

from sandbox_common import aws
from sandbox_common import naming as n

from .service import reaper


def end_paused_calls(now: float) -> dict[str, Any]:
    """The hook: {} when dispatch swept (its counts are in dispatch's `sweep_paused_calls` log
    line: the action's answer carries none, any caller may send it). Raises when dispatch cannot be
    invoked or answers an error (the run's summary reports the hook failed)."""
    answer = aws.client("lambda").invoke(
        FunctionName=reaper().settings.dispatch_function_name,
        Payload=json.dumps({"action": n.Action.SWEEP_PAUSED_CALLS}).encode("utf-8"),
    )
    body = json.loads(answer["Payload"].read() or b"null")
    if answer.get("FunctionError") or not isinstance(body, dict) or body.get("ok") is not True:
        raise RuntimeError(f"sweep_paused_calls failed: {answer.get('FunctionError') or body}")
    return {}


# Registered by the reaper's hooks.load() (SWEEP_MODULES names this module).
SWEEP_HOOKS = {n.REAPER_HOOK_PAUSED: end_paused_calls}
