"""Response fields, statuses and failure reasons."""

from __future__ import annotations

# Response and audit field of a call that got a new session for its turn: "warm" | "cold".
FIELD_SESSION_SOURCE = "session_source"
# The response status of a paused tool-calling call (docs/tool-calling.md).
STATUS_TOOL_CALL = "tool_call"
# The code text that routes an execute_code of a template with tools through the tools driver
# (dispatch.tools.run): code without it runs as ordinary code, where every tool is ToolNotAllowed.
TOOLS_MODULE = "sandbox_tools"
# Visible retries (docs/sessions.md): `events` entries of the response (their kind), their reasons.
EVENT_RETRYING = "retrying"
RETRY_SESSION_REAPED = "session_reaped"
RETRY_START_THROTTLED = "start_throttled"
RETRY_QUOTA_CONFLICT = "quota_transaction_conflict"
RETRY_LEDGER_CONFLICT = "session_ledger_conflict"
# failure_reason of the one row a call gets when its dispatch died mid-call.
REASON_DISPATCH_INTERRUPTED = "dispatch_interrupted"
# `reason` of the answer to a retry whose original is still in progress (or whose worker died and
# whose deadline has not passed yet): answered at once with `retry_after_s`, never awaited.
REASON_CALL_IN_PROGRESS = "call_in_progress"
# `reason` of the SandboxInvalidRequest answering an action whose turn_token is missing or does not
# match the turn's (the agent client raises it as TurnTokenMismatch).
REASON_TURN_TOKEN_MISMATCH = "turn_token_mismatch"
# failure_reason of a paused call ended by end_turn (or a resume after it): SandboxTimeout.
REASON_TOOL_TURN_ENDED = "tool_wait_ended:turn_ended"
# The local interpreter refuses Start with this marker at the front of its error message when it
# cannot isolate a session; the runner maps it to SandboxProvisioning with this `reason`.
REASON_ISOLATION_UNAVAILABLE = "isolation_unavailable"
# An `allowlist` session could not be given its egress proxy credential (or no proxy is
# configured): the session was stopped before any code ran (SandboxProvisioning).
REASON_EGRESS_UNAVAILABLE = "egress_unavailable"
# The kill switch (a call cap at 0, or the tenant disabled: docs/circuit-breakers.md): the boolean field of a
# refusal's log line, and the `reason` of admitted work it ended (a background job it cancelled
# answers it; rows carry `kill_switch:<why>`).
FIELD_KILL_SWITCH = "kill_switch"
# The local interpreter starts the stderr of a session process killed by a signal that was not the
# OOM killer's with this marker, then `:<signal number>`; the runner classifies it SandboxError
# naming the signal (failure_reason `killed_by_signal:<n>`), not SandboxOOM.
REASON_KILLED_BY_SIGNAL = "killed_by_signal"
# failure_reason suffix of a Python call the session stopped at its inner deadline, its session kept
# (`deadline_exceeded:<n>s:stopped_in_session`); without it, the runner's own deadline stopped the session.
REASON_STOPPED_IN_SESSION = "stopped_in_session"
# `reason` (and failure_reason) of a call refused because the agent invoked dispatch through a
# tenant-scoped alias for a tenant outside that scope (sandbox_common.agent_scope).
REASON_OUT_OF_SCOPE = "tenant_out_of_scope"
