"""The actions of the dispatch event."""

from __future__ import annotations

from enum import StrEnum


class Action(StrEnum):
    """Every action of the dispatch event (`{"action": ...}`): each is spelled here only."""

    BEGIN_TURN = "begin_turn"
    EXECUTE_CODE = "execute_code"
    END_TURN = "end_turn"
    GET_FILE = "get_file"
    GET_JOB = "get_job"
    CANCEL_JOB = "cancel_job"
    RESUME = "resume"
    # Internal, sent by the reaper's paused-calls hook: end the paused calls past their wait bound
    # (docs/tool-calling.md). Its answer is `{"ok": true}`; it ends nothing the bound has not already ended.
    SWEEP_PAUSED_CALLS = "sweep_paused_calls"


# The actions an agent sends (an unknown action's message lists these; the internal one is not).
AGENT_ACTIONS: tuple[Action, ...] = tuple(a for a in Action if a is not Action.SWEEP_PAUSED_CALLS)
