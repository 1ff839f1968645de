"""Agent-runtime client for the dispatch Lambda (§4.6).

    with SandboxTurn("thinkwork-prod-dispatch", tenant_id="acme", agent_id="agent-7",
                     template_id="analyst", turn_id="turn-123") as turn:
        if turn.tool:                       # None unless pre-flight said ready/provisioning
            result = turn.execute_code("print(1+1)")

`execute_code` generates a fresh call_id per call unless given one (pass the same call_id to
retry safely: dispatch answers a retry with the first result). With `strands-agents` installed,
`turn.strands_tool()` returns a ready Strands tool bound to this turn.

Programmatic tool calling (SPEC §15): `SandboxTurn(..., tools={"query_sales": fn})` makes the
agent's own functions callable from sandboxed code (for names on the template's allowlist).
`execute_code` then runs the loop itself — each `tool_call` answer runs `fn(**input)` here and
resumes the code with its result (or, if `fn` raised, with `tool_error`, which the code sees as
`sandbox_tools.ToolError`) — and returns only the final result, with `tool_calls`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .aws import SINGLE_ATTEMPT
from .naming import STATUS_TOOL_CALL  # stdlib-only, like tool_spec
from .tool_spec import TOOL_DESCRIPTION, TOOL_NAME

TOOL_CALL_STATUS = STATUS_TOOL_CALL


class DispatchUnavailable(RuntimeError):
    """The dispatch Lambda itself could not be invoked or crashed (not a named sandbox error)."""


class SandboxTurn:
    def __init__(
        self,
        function_name: str,
        *,
        tenant_id: str,
        agent_id: str,
        template_id: str,
        turn_id: str | None = None,
        user_id: str | None = None,
        invocation_source: str | None = None,
        lambda_client: Any = None,
        tools: Mapping[str, Callable[..., Any]] | None = None,
    ) -> None:
        self.function_name = function_name
        self.tenant_id = tenant_id
        self.agent_id = agent_id
        self.template_id = template_id
        self.turn_id = turn_id or f"turn-{uuid.uuid4().hex}"
        self.user_id = user_id
        self.invocation_source = invocation_source
        self._client = lambda_client
        self.sandbox: dict[str, Any] = {}
        self.tools: dict[str, Callable[..., Any]] = dict(tools or {})

    # --- transport ------------------------------------------------------------------------------
    def _invoke(self, event: dict[str, Any]) -> dict[str, Any]:
        if self._client is None:
            import boto3
            from botocore.config import Config

            # Read timeout above dispatch's own deadline; never retried (a retry is the caller's
            # decision, with the same call_id).
            self._client = boto3.client("lambda", config=Config(read_timeout=900, retries=dict(SINGLE_ATTEMPT)))
        try:
            out = self._client.invoke(FunctionName=self.function_name, Payload=json.dumps(event).encode())
            body = json.loads(out["Payload"].read())
        except Exception as exc:  # noqa: BLE001
            raise DispatchUnavailable(f"dispatch invoke failed: {type(exc).__name__}") from exc
        if out.get("FunctionError"):
            raise DispatchUnavailable(f"dispatch failed: {body.get('errorMessage', out['FunctionError'])}")
        return body

    def _ids(self) -> dict[str, Any]:
        ids = {"tenant_id": self.tenant_id, "agent_id": self.agent_id, "template_id": self.template_id,
               "turn_id": self.turn_id}  # fmt: skip
        if self.user_id:
            ids["user_id"] = self.user_id
        return ids

    # --- the three actions ----------------------------------------------------------------------
    def begin(self) -> dict[str, Any]:
        response = self._invoke({"action": "begin_turn", **self._ids()})
        self.sandbox = response.get("sandbox", {}) if response.get("ok") else {}
        return response

    def execute_code(self, code: str, *, call_id: str | None = None) -> dict[str, Any]:
        event = {"action": "execute_code", **self._ids(), "call_id": call_id or f"call-{uuid.uuid4().hex}",
                 "code": code}  # fmt: skip
        if self.invocation_source:
            event["invocation_source"] = self.invocation_source
        response = self._invoke(event)
        while response.get("ok") and response.get("status") == TOOL_CALL_STATUS:
            response = self._invoke(self._resume_event(response))
        return response

    def _resume_event(self, paused: dict[str, Any]) -> dict[str, Any]:
        """Run the requested tool here and build the `resume` that answers it."""
        call = paused.get("tool_call") or {}
        event: dict[str, Any] = {"action": "resume", "tenant_id": self.tenant_id, "agent_id": self.agent_id,
                                 "turn_id": self.turn_id, "continuation": paused.get("continuation")}  # fmt: skip
        fn = self.tools.get(str(call.get("name")))
        if fn is None:
            event["tool_error"] = f"tool {call.get('name')!r} is not available in this agent runtime"
            return event
        try:
            result = fn(**(call.get("input") or {}))
            json.dumps(result, allow_nan=False)
        except Exception as exc:  # noqa: BLE001 - a failing tool is the code's ToolError, not ours
            event["tool_error"] = f"{type(exc).__name__}: {exc}"
            return event
        event["tool_result"] = result
        return event

    def end(self) -> dict[str, Any]:
        return self._invoke({"action": "end_turn", "tenant_id": self.tenant_id, "turn_id": self.turn_id})

    @property
    def tool(self) -> dict[str, Any] | None:
        return self.sandbox.get("tool")

    def __enter__(self) -> SandboxTurn:
        self.begin()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.end()

    # --- Strands ----------------------------------------------------------------------------------
    def strands_tool(self, tools: Iterable[Any] = ()) -> Any:
        """A Strands `execute_code` tool bound to this turn; `tools` (the agent's Strands tools)
        become callable from the sandboxed code under their tool names (SPEC §15)."""
        try:
            from strands import tool
        except ImportError as exc:
            raise ImportError("strands_tool() needs the `strands-agents` package: pip install strands-agents") from exc
        for agent_tool in tools:
            self.tools[str(getattr(agent_tool, "tool_name", None) or agent_tool.__name__)] = agent_tool
        turn = self
        description = (self.tool or {}).get("description") or TOOL_DESCRIPTION

        @tool(name=TOOL_NAME, description=description)
        def execute_code(code: str) -> dict[str, Any]:
            """Run Python in the sandbox of this turn.

            Args:
                code: Python source to execute.
            """
            return turn.execute_code(code)

        return execute_code
