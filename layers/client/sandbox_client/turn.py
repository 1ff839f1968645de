"""Agent-runtime client for the dispatch Lambda.

    with SandboxTurn("thinkwork-prod-dispatch", tenant_id="acme", agent_id="agent-7",
                     template_id="analyst", turn_id="turn-123") as turn:
        if turn.tool:                       # None unless pre-flight said ready/provisioning
            result = turn.execute_code("print(1+1)")

Every action carries the turn's `turn_token` (docs/sessions.md), generated here once per turn.
`execute_code` generates a fresh call_id per call unless given one (pass the same call_id to
retry safely: dispatch answers a retry with the first result). Calls return typed results
(`results.ExecutionResult`, `results.JobResult` for background jobs) for code that ran, whatever
its outcome (a code error is `ok` false with a structured `error`: `result.error.name ==
"ValueError"`); a call dispatch refused raises (`errors.SandboxRefused`: SandboxCapExceeded with
`dimension` and `resets_at`, SandboxProvisioning, SandboxInvalidRequest, TurnTokenMismatch).

The tool surface (docs/tool-surface.md): `turn.definitions` are the tools begin_turn returned (execute_code,
run_command, get_job, cancel_job), served as they are; `turn.call_tool(name, input)` runs a model's
call of one of them. With `strands-agents` installed, `turn.strands_tools()` returns them as
Strands tools bound to this turn (`turn.strands_tool()`: execute_code alone).

Programmatic tool calling (docs/tool-calling.md): `SandboxTurn(..., tools={"query_sales": fn})` makes the
agent's own functions callable from sandboxed code (for names on the template's allowlist).
`execute_code` then runs the loop itself — each `tool_call` answer runs `fn(**input)` here and
resumes the code with its result (or, if `fn` raised, with `tool_error`, which the code sees as
`sandbox_tools.ToolError`) — and returns only the final result, with `tool_calls`. begin_turn is
told their names (`client_tools`), so the descriptions list only the tools this client answers.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .contract import (
    CANCEL_JOB,
    COMMAND_LANGUAGE,
    EXECUTE_CODE,
    GET_JOB,
    INVALID_REQUEST,
    PROVISIONING,
    RUN_COMMAND,
    SANDBOX_ERROR,
    SINGLE_ATTEMPT,
    STATUS_TOOL_CALL,
    new_token,
)
from .errors import (
    ArtifactMismatch,
    ArtifactUnavailable,
    DispatchUnavailable,
    SandboxInvalidRequest,
    ToolUnavailable,
    raise_refusal,
)
from .jobs import JobsMixin
from .results import ExecutionResult, Preview, preview_of


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
        # the turn token: one secret per turn, generated here and sent with every action of the turn
        # (a retried call carries the same one), so the caller never handles it.
        self.turn_token = turn_token or new_token()
        self.sandbox: dict[str, Any] = {}
        self.began: dict[str, Any] | None = None  # begin_turn's answer
        self.tools: dict[str, Callable[..., Any]] = dict(tools or {})
        self._told: frozenset[str] = frozenset()  # the client_tools begin_turn was last told

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
            body: dict[str, Any] = json.loads(out["Payload"].read())
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
        """begin_turn; it is told the names of this client's tools (`client_tools`), so
        the tool descriptions list only template tools this client can answer. Raises
        SandboxRefused when dispatch refuses it (e.g. an invalid id, another turn's token); a tenant
        or template without a sandbox is an answer (`tool` is then None, `no_tool_reason()` says
        why)."""
        event = {"action": "begin_turn", **self._ids(), "client_tools": sorted(self.tools)}
        response = raise_refusal(self._invoke(event))
        self.began = response
        self._told = frozenset(self.tools)
        self.sandbox = response.get("sandbox", {}) if response.get("ok") else {}
        return response

    def execute_code(
        self,
        code: str,
        *,
        call_id: str | None = None,
        files: list[dict[str, str]] | None = None,
        language: str | None = None,
    ) -> ExecutionResult:
        """`files`: input files, {"path", "content_base64"} or {"path", "s3_uri"}; `language`:
        "python" (the default), "javascript" or "typescript" (a Node.js program), or "bash" (a
        shell script, what run_command sends). Raises SandboxRefused when dispatch refuses the
        call; any run of the code is a result."""
        options: dict[str, Any] = {"files": files} if files else {}
        if language is not None:
            options["language"] = language
        return self._execute({"code": code, **options}, call_id=call_id)

    def run_command(
        self, command: str, *, call_id: str | None = None, files: list[dict[str, str]] | None = None
    ) -> ExecutionResult:
        """A bash script in this turn's session: execute_code with language bash."""
        return self.execute_code(command, call_id=call_id, files=files, language=COMMAND_LANGUAGE)

    def _execute(self, fields: dict[str, Any], *, call_id: str | None = None) -> ExecutionResult:
        """One execute_code with the given fields; the turn's own ids are set last, so no field can
        speak for another tenant, agent or turn. Returns the final result (every tool_call
        pause answered here)."""
        event = {
            **fields,
            "action": "execute_code",
            **self._ids(),
            "call_id": call_id or f"call-{uuid.uuid4().hex}",
        }
        if self.invocation_source:
            event["invocation_source"] = self.invocation_source
        return ExecutionResult.from_answer(self._run_to_end(self._invoke(event)))

    def _run_to_end(self, response: dict[str, Any]) -> dict[str, Any]:
        """Answer every `tool_call` pause until the call's final result; a refusal (of
        the call, or of a resume under the kill switch) is raised."""
        while raise_refusal(response).get("ok") and response.get("status") == STATUS_TOOL_CALL:
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
        """`get_file`: metadata and a presigned URL (≤ 15 min) of one of this tenant's artifacts."""
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
        """end_turn (stops the turn's session); raises SandboxRefused when dispatch refuses it."""
        return raise_refusal(
            self._invoke(
                {
                    "action": "end_turn",
                    "tenant_id": self.tenant_id,
                    "turn_id": self.turn_id,
                    "turn_token": self.turn_token,
                }
            )
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

    # --- the tool surface -----------------------------------------------------------------------
    @property
    def definitions(self) -> list[dict[str, Any]]:
        """Every tool definition begin_turn returned (`tools`, or `tool` alone,
        which is what an older dispatch answers), in its order; [] before begin or without a sandbox."""
        tools = self.sandbox.get("tools")
        if isinstance(tools, list):
            return tools
        return [self.tool] if self.tool else []

    def definition(self, name: str) -> dict[str, Any] | None:
        return next((d for d in self.definitions if d.get("name") == name), None)

    def call_tool(self, name: str, tool_input: dict[str, Any]) -> ExecutionResult:
        """A model's call of one of begin_turn's tools, as the dispatch action it stands for:
        execute_code as is, run_command as execute_code with language bash and the command as
        `code`, get_job / cancel_job as those actions. Input is not validated here (the MCP server
        and the Strands tools check it against the definition first: `tool_input.input_problem`);
        dispatch validates it again. A name begin_turn did not define is refused here (raises
        SandboxInvalidRequest, nothing sent), or ToolUnavailable when begin_turn gave no tool at
        all; a refusal from dispatch raises like any call's."""
        if not self.definitions:
            raise ToolUnavailable(self.no_tool_reason())
        if self.definition(name) is None:
            names = ", ".join(str(d.get("name")) for d in self.definitions)
            message = f"unknown tool {name!r}; this turn has: {names}"
            raise SandboxInvalidRequest({"ok": False, "error": INVALID_REQUEST, "error_message": message})
        if name == RUN_COMMAND:
            fields = {k: v for k, v in tool_input.items() if k != "command"}
            return self._execute({**fields, "language": COMMAND_LANGUAGE, "code": tool_input.get("command")})
        if name == GET_JOB:
            return self.get_job(str(tool_input.get("job_id")))
        if name == CANCEL_JOB:
            return self.cancel_job(str(tool_input.get("job_id")))
        return self._execute(dict(tool_input))

    def execute_tool_input(self, tool_input: dict[str, Any]) -> ExecutionResult:
        """One call of the `execute_code` tool with the input a model sent (every field of it goes
        into the event, so a field the definition gains reaches dispatch as is)."""
        return self._execute(dict(tool_input))

    def previews(self, result: ExecutionResult) -> list[Preview]:
        """The artifacts of `result` the model can see inline (a PNG ≤ 1 MiB, a UTF-8 text ≤ 16 KiB),
        with their bytes fetched through get_file and checked against their sha256. An artifact
        whose bytes cannot be fetched or are not what it claims is left out: the model still gets
        its link."""
        previews = []
        for artifact in result.previewable:
            try:
                _, data = self.fetch(str(artifact.file_id))
            except (ArtifactUnavailable, ArtifactMismatch, DispatchUnavailable, OSError):
                continue
            preview = preview_of(artifact, data)
            if preview is not None:
                previews.append(preview)
        return previews

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
    def strands_tools(self, tools: Iterable[Any] = ()) -> list[Any]:
        """Every tool begin_turn returned, as Strands tools bound to this turn
        (`strands_tool.SandboxStrandsTool`, specs exactly as begin_turn defined them); `tools` (the
        agent's Strands tools) become callable from the sandboxed code under their names
        (programmatic tool calling). ToolUnavailable when begin_turn gave this turn no tool."""
        sandbox_tool = self._strands_tool_class()
        self._pass_through(tools)
        if not self.definitions:
            raise ToolUnavailable(self.no_tool_reason())
        return [sandbox_tool(self, definition) for definition in self.definitions]

    def strands_tool(self, tools: Iterable[Any] = ()) -> Any:
        """This turn's `execute_code` alone as a Strands tool (see `strands_tools`)."""
        sandbox_tool = self._strands_tool_class()
        self._pass_through(tools)
        if self.tool is None:
            raise ToolUnavailable(self.no_tool_reason())
        return sandbox_tool(self, self.definition(EXECUTE_CODE) or self.tool)

    @staticmethod
    def _strands_tool_class() -> Any:
        try:
            # Optional dependency, imported only when asked for: the client itself needs only boto3.
            from .strands_tool import SandboxStrandsTool
        except ImportError as exc:
            raise ImportError(
                "strands_tool() needs the `strands-agents` package: pip install strands-agents"
            ) from exc
        return SandboxStrandsTool

    def _pass_through(self, tools: Iterable[Any]) -> None:
        """The agent's Strands tools become callable from code; begin_turn is asked again when that
        adds a name it was not told, so the descriptions list what this client now answers."""
        for agent_tool in tools:
            self.tools[str(getattr(agent_tool, "tool_name", None) or agent_tool.__name__)] = agent_tool
        if self.began is not None and set(self.tools) - self._told:
            self.begin()
