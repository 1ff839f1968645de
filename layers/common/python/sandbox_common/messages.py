"""Sentences an agent can relay to its user, one place for all of them (dispatch, quota, the
interrupted-call sweep)."""

from __future__ import annotations

from datetime import datetime

from . import dimensions

TENANT_DISABLED = (
    "Code execution is not enabled for this workspace, so I can't run code here. "
    "An administrator can enable it."
)
NOT_REQUESTED = "This assistant is not configured with a code sandbox, so I can't run code here."
ISOLATION_UNAVAILABLE = (
    "The local code sandbox cannot isolate code on this machine, so no code was run; "
    "an operator needs to install its isolation tools."
)
NOT_READY = "The code sandbox for this workspace is still being set up; please try again in a few minutes."
PREFLIGHT_UNAVAILABLE = (
    "I couldn't confirm that code execution is allowed right now; please try again shortly."
)
INTERNAL = "The code sandbox had an internal problem running this call; please try again."
OUT_OF_SCOPE = (
    "This assistant is not allowed to use the code sandbox for this workspace, so I can't run code "
    "here. An administrator can grant it access."
)
CALL_ID_REUSED = (
    "Invalid request: call_id was already used for a different request (other code, agent, "
    "turn, template or user); use a new call_id."
)
STILL_RUNNING = (
    "This call is still running from an earlier attempt; please send the same request again after "
    "retry_after_s seconds."
)
DISPATCH_INTERRUPTED = (
    "An earlier attempt of this call was interrupted before it finished, so its result is unknown "
    "(the code may or may not have run); check any side effects, then retry with a new call_id."
)
SESSION_START_WAIT = "The sandbox session for this turn is still starting; please retry the call."
TURN_ENDED = "Invalid request: this turn has ended; start a new turn with a new turn_id."
TURN_NOT_YOURS = (
    "Invalid request: turn_id belongs to another tenant or agent; start a new turn with a new turn_id."
)
SESSION_RESTARTED = (
    "A new sandbox session was started for this call: variables, imports and files from earlier calls are"
    " gone."
)


def job_killed(why: str) -> str:
    """A background job the kill switch cancelled: what happened, then why (the cap's
    refusal sentence or TENANT_DISABLED)."""
    return f"The background job was stopped before it finished. {why}"


def cap_exceeded(dimension: str, resets_at: str) -> str:
    """A cap refusal: the dimension's sentence, the reset time, and the dimension's name
    literally, e.g. `(cap: tenant_daily)`; anything but a known dimension is named `unknown`."""
    when = _hhmm(resets_at)
    known = dimensions.get(dimension)
    if known is not None:
        return known.refusal(resets_at, when)
    return (
        "I couldn't confirm the code-execution quota, so the call was refused to be safe; "
        f"please try again at {when} UTC ({resets_at}). (cap: {dimensions.UNKNOWN})"
    )


def _hhmm(resets_at: str) -> str:
    try:
        moment = datetime.strptime(resets_at, "%Y-%m-%dT%H:%M:%SZ")
        return moment.strftime("%H:%M:%S" if moment.second else "%H:%M")
    except ValueError:
        return resets_at


# --- sessions as a managed resource ------------------------------------------
TURN_TOKEN_REJECTED = (
    "Invalid request: this turn's turn_token is missing or does not match; every action of a turn must carry "
    "the token its first action used."
)


# --- programmatic tool calling ---------------------------------------------
TOOL_WAIT_EXPIRED = (
    "No tool result arrived within {seconds} seconds, so the code was stopped. The sandbox session was "
    "reset, so variables and files from earlier calls in this turn are gone."
)
TOOL_PROTOCOL_BROKEN = (
    "The code interfered with the sandbox's tool-calling runtime, so the call was stopped and the sandbox "
    "session was reset."
)
TOOL_SESSION_LOST = (
    "The sandbox session ended while the code was waiting for a tool result; please run the code again."
)
TOOL_PREVIOUS_CALL_PAUSED = (
    "An earlier call in this turn is still waiting for a tool result; resume or end it before running more"
    " code."
)
CONTINUATION_INVALID = (
    "Invalid request: the continuation is unknown, already used, expired or not for this turn; "
    "nothing was run."
)
CONTINUATION_STORE_UNAVAILABLE = (
    "The code sandbox could not store or load this paused call right now; please try again."
)
TOOL_TURN_ENDED = "The turn ended while the code was waiting for a tool result, so the code was stopped."


# --- background jobs -------------------------------------------------------------------
JOB_FILES_UNSUPPORTED = (
    "Invalid request: files cannot be sent with background: true; send them with a foreground "
    "execute_code first, then start the job."
)


# --- files: get_file and MCP resources -------------------------------------------------
# One answer for an unknown file_id and another tenant's (existence never leaks): dispatch's
# get_file, and `sandboxctl mcp`'s resources/read for a uri naming another tenant.
FILE_NOT_FOUND = "Invalid request: no file with this file_id exists for this workspace."
