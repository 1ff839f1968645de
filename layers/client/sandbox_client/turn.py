"""Agent-runtime client for the dispatch Lambda (§4.6).

    with SandboxTurn("thinkwork-prod-dispatch", tenant_id="acme", agent_id="agent-7",
                     template_id="analyst", turn_id="turn-123") as turn:
        if turn.tool:                       # None unless pre-flight said ready/provisioning
            result = turn.execute_code("print(1+1)")

Every action carries the turn's `turn_token` (§16.5), generated here once per turn.
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

from .contract import (
    INVALID_REQUEST,
    PROVISIONING,
    SANDBOX_ERROR,
    SINGLE_ATTEMPT,
    STATUS_TOOL_CALL,
    new_token,
)
from .jobs import JobsMixin


class DispatchUnavailable(RuntimeError):
    """The dispatch Lambda itself could not be invoked or crashed (not a named sandbox error)."""


class ArtifactUnavailable(RuntimeError):
    """get_file refused (unknown file_id, or another tenant's); `error` names the class."""

    def __init__(self, message: str, error: str = INVALID_REQUEST) -> None:
        super().__init__(message)
        self.error = error


class ArtifactMismatch(RuntimeError):
    """The downloaded bytes do not hash to the artifact's sha256."""


class ToolUnavailable(RuntimeError):
    """This turn has no execute_code tool to serve: begin_turn was not called yet, or it answered
    without one (the tenant or template has no sandbox); the message says which."""


class SandboxTurn(JobsMixin):  # background jobs: submit/get_job/cancel_job/wait (agent_jobs)
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
        turn_token: str | None = None,
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
        # §16.5: one secret per turn, generated here and sent with every action of the turn
        # (a retried call carries the same one), so the caller never handles it.
        self.turn_token = turn_token or new_token()
        self.sandbox: dict[str, Any] = {}
        self.began: dict[str, Any] | None = None  # begin_turn's answer
        self.tools: dict[str, Callable[..., Any]] = dict(tools or {})

    # --- transport ------------------------------------------------------------------------------
    def _invoke(self, event: dict[str, Any]) -> dict[str, Any]:
        if self._client is None:
            import boto3
            from botocore.config import Config

            # Read timeout above dispatch's own deadline; never retried (a retry is the caller's
            # decision, with the same call_id).
            self._client = boto3.client(
                "lambda", config=Config(read_timeout=900, retries=dict(SINGLE_ATTEMPT))
            )
        try:
            out = self._client.invoke(FunctionName=self.function_name, Payload=json.dumps(event).encode())
            body = json.loads(out["Payload"].read())
        except Exception as exc:  # noqa: BLE001
            raise DispatchUnavailable(f"dispatch invoke failed: {type(exc).__name__}") from exc
        if out.get("FunctionError"):
            raise DispatchUnavailable(f"dispatch failed: {body.get('errorMessage', out['FunctionError'])}")
        return body

    def _ids(self) -> dict[str, Any]:
        ids = {
            "tenant_id": self.tenant_id,
            "agent_id": self.agent_id,
            "template_id": self.template_id,
            "turn_id": self.turn_id,
            "turn_token": self.turn_token,
        }
        if self.user_id:
            ids["user_id"] = self.user_id
        return ids

    # --- the three actions ----------------------------------------------------------------------
    def begin(self) -> dict[str, Any]:
        response = self._invoke({"action": "begin_turn", **self._ids()})
        self.began = response
        self.sandbox = response.get("sandbox", {}) if response.get("ok") else {}
        return response

    def execute_code(
        self, code: str, *, call_id: str | None = None, files: list[dict[str, str]] | None = None
    ) -> dict[str, Any]:
        """`files`: §14.1 entries, {"path", "content_base64"} or {"path", "s3_uri"}."""
        event: dict[str, Any] = {
            "action": "execute_code",
            **self._ids(),
            "call_id": call_id or f"call-{uuid.uuid4().hex}",
            "code": code,
        }
        if self.invocation_source:
            event["invocation_source"] = self.invocation_source
        if files:
            event["files"] = files
        return self._run_to_end(self._invoke(event))

    def _run_to_end(self, response: dict[str, Any]) -> dict[str, Any]:
        """Answer every `tool_call` pause (SPEC §15) until the call's final result."""
        while response.get("ok") and response.get("status") == STATUS_TOOL_CALL:
            response = self._invoke(self._resume_event(response))
        return response

    def _resume_event(self, paused: dict[str, Any]) -> dict[str, Any]:
        """Run the requested tool here and build the `resume` that answers it."""
        call = paused.get("tool_call") or {}
        event: dict[str, Any] = {
            "action": "resume",
            "tenant_id": self.tenant_id,
            "agent_id": self.agent_id,
            "turn_id": self.turn_id,
            "turn_token": self.turn_token,
            "continuation": paused.get("continuation"),
        }
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

    def get_file(self, file_id: str) -> dict[str, Any]:
        """§14.3: metadata and a presigned URL (≤ 15 min) of one of this tenant's artifacts."""
        return self._invoke({"action": "get_file", "tenant_id": self.tenant_id, "file_id": file_id})

    def fetch(self, file_id: str, *, opener: Any = None) -> tuple[dict[str, Any], bytes]:
        """(get_file answer, the artifact's bytes) through its presigned URL; the bytes must match
        its sha256, else ArtifactMismatch. ArtifactUnavailable when get_file says no."""
        import hashlib
        import urllib.request

        answer = self.get_file(file_id)
        if not answer.get("ok"):
            raise ArtifactUnavailable(
                answer.get("error_message", "the file is not available"),
                str(answer.get("error") or SANDBOX_ERROR),
            )
        with (opener or urllib.request.urlopen)(answer["url"]) as response:
            data = response.read()
        if hashlib.sha256(data).hexdigest() != answer["sha256"]:
            raise ArtifactMismatch(f"{file_id}: downloaded bytes do not match the artifact's sha256")
        return answer, data

    def download(self, file_id: str, path: str, *, opener: Any = None) -> dict[str, Any]:
        """Fetch an artifact to `path` through its presigned URL; the bytes must match its sha256
        (else ArtifactMismatch and nothing is left at `path`). Returns the get_file answer."""
        import os

        answer, data = self.fetch(file_id, opener=opener)
        tmp = f"{path}.partial"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        return answer

    def end(self) -> dict[str, Any]:
        return self._invoke(
            {
                "action": "end_turn",
                "tenant_id": self.tenant_id,
                "turn_id": self.turn_id,
                "turn_token": self.turn_token,
            }
        )

    @property
    def tool(self) -> dict[str, Any] | None:
        """The execute_code tool definition begin_turn returned (None before begin or without one)."""
        return self.sandbox.get("tool")

    def no_tool_reason(self) -> str:
        """Why this turn has no tool, begin_turn's named error first when it gave one."""
        if self.began is None:
            return "ToolUnavailable: begin_turn has not been called for this turn"
        sandbox = self.began.get("sandbox") or {}
        error = sandbox.get("error") or self.began.get("error") or PROVISIONING
        message = (
            sandbox.get("error_message")
            or self.began.get("error_message")
            or f"no sandbox for this template (status {sandbox.get('status', 'unknown')})"
        )
        return f"{error}: {message}"

    def __enter__(self) -> SandboxTurn:
        self.begin()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.end()

    # --- tool adapters: MCP server, Strands tool ----------------------------------------
    def execute_tool_input(self, tool_input: dict[str, Any]) -> dict[str, Any]:
        """One call of the `execute_code` tool with the input a model sent (validated against the
        tool definition begin_turn returned first: `tool_input.input_problem`). Every field of the
        input goes into the event, so a field the tool definition gains reaches dispatch as is; the
        turn's own ids are set last, so no input can speak for another tenant, agent or turn."""
        event = {**tool_input, "action": "execute_code", **self._ids(), "call_id": f"call-{uuid.uuid4().hex}"}
        if self.invocation_source:
            event["invocation_source"] = self.invocation_source
        return self._run_to_end(self._invoke(event))  # the model sees only the final result (§15)

    def next_turn(self, turn_id: str | None = None) -> SandboxTurn:
        """End this turn (stopping its session) and begin the next one for the same tenant, agent,
        template and user: one call. Returns the new, begun turn."""
        self.end()
        following = SandboxTurn(
            self.function_name,
            tenant_id=self.tenant_id,
            agent_id=self.agent_id,
            template_id=self.template_id,
            turn_id=turn_id,
            user_id=self.user_id,
            invocation_source=self.invocation_source,
            lambda_client=self._client,
            tools=self.tools,
        )
        following.begin()
        return following

    # --- Strands ----------------------------------------------------------------------------------
    def strands_tool(self, tools: Iterable[Any] = ()) -> Any:
        """This turn's `execute_code` as a Strands tool (`strands_tool.SandboxStrandsTool`), exactly as
        begin_turn defined it; `tools` (the agent's Strands tools) become callable from the sandboxed
        code under their names (SPEC §15). ToolUnavailable when begin_turn gave this turn no tool."""
        try:
            # Optional dependency, imported only when asked for: the client itself needs only boto3.
            from .strands_tool import SandboxStrandsTool
        except ImportError as exc:
            raise ImportError(
                "strands_tool() needs the `strands-agents` package: pip install strands-agents"
            ) from exc
        if self.tool is None:
            raise ToolUnavailable(self.no_tool_reason())
        for agent_tool in tools:
            self.tools[str(getattr(agent_tool, "tool_name", None) or agent_tool.__name__)] = agent_tool
        return SandboxStrandsTool(self)
