"""The sandbox as an MCP server over stdio (official `mcp` SDK), what `sandboxctl mcp` serves.

One MCP session = one turn: `begin_turn` when the session starts (the server's lifespan, before
the client's `initialize` is answered) and `end_turn` when it ends (stdin closed by the client,
or SIGTERM, which the SDK's client sends when a server outlives its 2 s grace), so the turn's
session is stopped with the MCP session and never left to the interpreter's timeout.

Tools: every tool `begin_turn` returned (the one tool surface: execute_code, run_command, get_job,
cancel_job — the one definition, built by dispatch), exactly as it defined them, or none when the
tenant/template has no sandbox. Until `begin_turn` has answered (dispatch unreachable: the
stack not up yet, no region or credentials), the server lists the definitions packaged with the
client (`definitions.packaged`: dispatch's with the default figures), so a host that lists tools
once, at start, has them; each call meanwhile answers a tool error saying what to fix, and works
as soon as dispatch answers, without a restart. When the tools `begin_turn` then gives differ from
those listed (other figures, or none), the server sends `notifications/tools/list_changed`
(declared as the `tools.listChanged` capability) with the answer of the call that found it.
begin_turn is told `client_tools: []`: an MCP host cannot answer the template's tools from code
(programmatic tool calling), so no description lists them. Each call is
validated against its definition, then mapped to its dispatch action by the agent client
(`SandboxTurn.call_tool`). Results:
- the dispatch answer as JSON text and as `structuredContent`; for each artifact in its `files`
  list a PNG of at most 1 MiB as `ImageContent` (base64) and a UTF-8 text of at most 16 KiB as
  text (their bytes through dispatch's get_file, sha256 checked: `SandboxTurn.previews`), and one
  MCP `resource_link` (uri `sandbox-file://TENANT/FILE_ID`, name, MIME type, size);
- any `ok: false` answer, an input the schema refuses, or dispatch itself failing: a tool error
  (`isError: true`) whose text starts with the named class (`SandboxCapExceeded: ...`).
Unreachable dispatch: the server starts anyway (the host sees no closed connection). `connect`
(given by `sandboxctl mcp`) finds the dispatch function and a Lambda client, or raises
DispatchUnavailable saying what to fix (the local stack not running, no AWS region or
credentials in the server's environment); begin_turn is tried again at each `tools/list` and
tool call until it succeeds, and until then every tool call is a tool error with that sentence.
Resources (`get_file` through MCP): `resources/list` lists the artifacts of this session's calls
(the same `sandbox-file://TENANT/FILE_ID` uris as the links); `resources/read` of such a uri goes
through dispatch's `get_file` for this server's tenant — the same tenant-scoped check, so an
unknown file_id and one of another tenant get the same error — then fetches the presigned URL
and checks the sha256: text (a `text/*`, JSON, CSV... type that decodes as UTF-8) comes back as
`text`, anything else as base64 `blob`. A uri naming another tenant is refused here with that same
answer, before dispatch is asked.
Built on the agent client (`turn.SandboxTurn`): the same transport, ids and call_id rules as
every other caller.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from . import definitions as packaged_definitions
from .contract import FILE_ID_RE, FILE_NOT_FOUND, INVALID_REQUEST, MCP_SERVER_NAME
from .errors import ArtifactMismatch, ArtifactUnavailable, DispatchUnavailable, SandboxRefused
from .results import Artifact, ExecutionResult, is_texty
from .tool_input import failure_text, input_problem
from .turn import SandboxTurn

FILE_URI_SCHEME = "sandbox-file"
_FILE_URI_RE = re.compile(rf"^{FILE_URI_SCHEME}://([^/]+)/([^/]+)$")
# (Lambda client, dispatch function name), or DispatchUnavailable saying what to fix
Connect = Callable[[], tuple[Any, str]]


def file_uri(tenant_id: str, file_id: str) -> str:
    return f"{FILE_URI_SCHEME}://{tenant_id}/{file_id}"


def resource_contents(
    uri: str, content_type: str | None, data: bytes
) -> types.TextResourceContents | types.BlobResourceContents:
    """One artifact's bytes as MCP resource contents: text when its type is textual and it is UTF-8."""
    if is_texty(content_type):
        try:
            return types.TextResourceContents(uri=uri, mime_type=content_type, text=data.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    return types.BlobResourceContents(
        uri=uri, mime_type=content_type, blob=base64.b64encode(data).decode("ascii")
    )


def file_link(tenant_id: str, artifact: Artifact) -> types.ResourceLink:
    """A stored artifact (an entry of an answer's `files`) as an MCP resource link."""
    return types.ResourceLink(
        uri=file_uri(tenant_id, str(artifact.file_id)),
        name=artifact.filename,
        mime_type=artifact.content_type,
        size=artifact.bytes,
    )


def file_links(tenant_id: str, files: list[dict[str, Any]]) -> list[types.ResourceLink]:
    """The `files` list of an execute_code answer as MCP resource links (skipped ones have none)."""
    artifacts = (Artifact.from_entry(f) for f in files)
    return [file_link(tenant_id, a) for a in artifacts if a.stored]


def _error(text: str, structured: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=text)], structured_content=structured, is_error=True
    )


class McpSandbox:
    """The turn behind one MCP session: begin once it can (thread-safe), end once, map each call."""

    def __init__(
        self,
        connect: Connect,
        *,
        tenant_id: str,
        agent_id: str,
        template_id: str,
        turn_id: str | None = None,
        user_id: str | None = None,
    ) -> None:
        self._connect = connect
        self.tenant_id = tenant_id
        self.agent_id = agent_id
        self.template_id = template_id
        self.turn_id = turn_id or f"turn-{uuid.uuid4().hex}"  # one turn, also across retried begins
        self.user_id = user_id
        self.turn: SandboxTurn | None = None  # once `connect` succeeded
        self.began: dict[str, Any] | None = None
        self.begin_error: str | None = None
        self._begin_lock = threading.Lock()
        self.ended = False
        self._end_lock = threading.Lock()
        self._ending_thread: int | None = None
        self.artifacts: dict[str, types.ResourceLink] = {}  # uri -> link, this session's artifacts
        self._artifacts_lock = threading.Lock()
        self._listed: str | None = None  # the definitions tools/list last answered (as JSON)

    # --- the turn ---------------------------------------------------------------------------------
    def begin(self) -> None:
        """begin_turn, unless this session's turn already has its tools; a failure is kept (as
        what to fix) and tried again by the next tools/list or tool call."""
        with self._begin_lock:
            if self.turn is not None and self.turn.definitions:
                return
            if self.turn is None:
                try:
                    lambda_client, function_name = self._connect()
                except DispatchUnavailable as exc:  # its sentence says what to fix
                    self._begin_failed(f"DispatchUnavailable: {exc}")
                    return
                # MCP hosts answer no template tool from code: an empty `tools` mapping makes
                # begin_turn's `client_tools` empty, so no description lists one.
                self.turn = SandboxTurn(
                    function_name,
                    tenant_id=self.tenant_id,
                    agent_id=self.agent_id,
                    template_id=self.template_id,
                    turn_id=self.turn_id,
                    user_id=self.user_id,
                    lambda_client=lambda_client,
                )
            try:
                self.began = self.turn.begin()
                self.begin_error = None
            except DispatchUnavailable as exc:
                self._begin_failed(self.what_to_fix(exc))
            except SandboxRefused as refused:  # e.g. an id dispatch refuses: nothing to retry into
                self._begin_failed(f"{refused.error}: {refused.error_message}")

    def _begin_failed(self, reason: str) -> None:
        self.begin_error = reason
        print(f"sandboxctl mcp: begin_turn failed: {reason}", file=sys.stderr)

    def what_to_fix(self, exc: DispatchUnavailable) -> str:
        """The tool error for dispatch being unreachable: `connect`'s own sentence when it fails
        now (it names what to fix), else the failure as it was."""
        try:
            self._connect()
        except DispatchUnavailable as reason:
            return f"DispatchUnavailable: {reason}"
        return f"DispatchUnavailable: {exc}"

    def end(self) -> None:
        """end_turn once, whoever asks first (lifespan exit, the SIGTERM handler, serve's
        finally); a later caller waits for the first to finish, so the process never exits
        half-way through it."""
        with self._end_lock:
            if self.ended or self.began is None or self.turn is None:
                return
            self.ended = True
            self._ending_thread = threading.get_ident()
            try:
                self.turn.end()
            except (DispatchUnavailable, SandboxRefused) as exc:
                print(f"sandboxctl mcp: end_turn failed: {exc}", file=sys.stderr)
            finally:
                self._ending_thread = None

    def ending_here(self) -> bool:
        """True while this very thread is inside end() (a signal handler interrupted it)."""
        return self._ending_thread == threading.get_ident()

    # --- tools --------------------------------------------------------------------------------------
    def definitions(self) -> list[dict[str, Any]]:
        """What this session serves: begin_turn's tools once it answered (none without a sandbox),
        the packaged definitions until then."""
        if self.turn is not None and self.turn.began is not None:
            return self.turn.definitions
        return packaged_definitions.packaged()

    def tools(self) -> list[types.Tool]:
        self.begin()
        served = self.definitions()
        self._listed = json.dumps(served, sort_keys=True)
        return [
            types.Tool(name=d["name"], description=d["description"], input_schema=d["input_schema"])
            for d in served
        ]

    def tools_changed(self) -> bool:
        """The tools served now differ from those tools/list last answered (once per change: the
        host is told, and lists again)."""
        if self._listed is None:
            return False
        now = json.dumps(self.definitions(), sort_keys=True)
        if now == self._listed:
            return False
        self._listed = now
        return True

    def unavailable(self) -> str:
        """Why there is no tool: what to fix when dispatch is unreachable, else begin_turn's own
        named error."""
        if self.begin_error or self.turn is None:
            return self.begin_error or "DispatchUnavailable: begin_turn has not been answered"
        return self.turn.no_tool_reason()

    def call(self, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        self.begin()
        turn = self.turn
        if turn is None or not turn.definitions:
            return _error(self.unavailable())
        definition = turn.definition(name)
        if definition is None:
            names = ", ".join(str(d["name"]) for d in turn.definitions)
            return _error(f"{INVALID_REQUEST}: unknown tool {name!r}; this server has: {names}")
        tool_input = arguments or {}
        problem = input_problem(tool_input, definition["input_schema"])
        if problem is not None:
            return _error(f"{INVALID_REQUEST}: {problem}")
        try:
            result = turn.call_tool(name, tool_input)
        except SandboxRefused as refused:  # the model sees it as any `ok: false` answer
            result = refused.result
        except DispatchUnavailable as exc:
            return _error(self.what_to_fix(exc))
        return self.tool_result(turn, result)

    def tool_result(self, turn: SandboxTurn, result: ExecutionResult) -> types.CallToolResult:
        """The answer as text (named class first on an error), then per artifact what the model
        can see of it (an image, a text) and its link."""
        text = failure_text(result)
        content: list[types.ContentBlock] = [
            types.TextContent(text=text or json.dumps(result.raw, sort_keys=True))
        ]
        previews = {p.artifact.file_id: p for p in turn.previews(result)}
        links = []
        for artifact in result.files:
            if not artifact.stored:
                continue
            preview = previews.get(artifact.file_id)
            if preview is not None and preview.kind == "image":
                data = base64.b64encode(preview.data).decode("ascii")
                content.append(types.ImageContent(data=data, mime_type="image/png"))
            elif preview is not None:
                content.append(types.TextContent(text=preview.text))
            links.append(file_link(self.tenant_id, artifact))
            content.append(links[-1])
        with self._artifacts_lock:
            self.artifacts.update((str(link.uri), link) for link in links)
        return types.CallToolResult(content=content, structured_content=result.raw, is_error=text is not None)

    # --- resources ----------------------------------------------------------------------------------
    def resources(self) -> list[types.Resource]:
        """This session's artifacts, in the order they came back."""
        with self._artifacts_lock:
            links = list(self.artifacts.values())
        return [
            types.Resource(uri=link.uri, name=link.name, mime_type=link.mime_type, size=link.size)
            for link in links
        ]

    def read(self, uri: str) -> types.ReadResourceResult:
        """One artifact by its uri, through dispatch's tenant-scoped get_file. Raises MCPError."""
        match = _FILE_URI_RE.match(uri)
        if not match or not FILE_ID_RE.match(match.group(2)) or match.group(1) != self.tenant_id:
            # Malformed, or another tenant's: the same answer as an unknown file_id (nothing leaks).
            raise MCPError(types.INVALID_PARAMS, f"{INVALID_REQUEST}: {FILE_NOT_FOUND}")
        if self.turn is None:
            raise MCPError(types.INTERNAL_ERROR, self.unavailable())
        try:
            answer, data = self.turn.fetch(match.group(2))
        except ArtifactUnavailable as exc:
            raise MCPError(types.INVALID_PARAMS, f"{exc.error}: {exc}") from None
        except ArtifactMismatch as exc:
            raise MCPError(types.INTERNAL_ERROR, f"SandboxError: {exc}") from None
        except DispatchUnavailable as exc:
            raise MCPError(types.INTERNAL_ERROR, self.what_to_fix(exc)) from None
        except OSError as exc:  # the presigned URL could not be fetched
            raise MCPError(
                types.INTERNAL_ERROR, f"SandboxError: the file could not be downloaded ({type(exc).__name__})"
            ) from None
        return types.ReadResourceResult(contents=[resource_contents(uri, answer.get("content_type"), data)])


def build_server(sandbox: McpSandbox) -> Server[Any]:
    @asynccontextmanager
    async def lifespan(_: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        await anyio.to_thread.run_sync(sandbox.begin)
        try:
            yield {}
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(sandbox.end)

    async def list_tools(_ctx: Any, _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        # begin_turn may be tried again here (blocking boto3): off the event loop
        return types.ListToolsResult(tools=await anyio.to_thread.run_sync(sandbox.tools))

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        # Blocking boto3 call: off the event loop, so pings and other calls are still answered.
        result = await anyio.to_thread.run_sync(sandbox.call, params.name, params.arguments)
        if sandbox.tools_changed():  # begin_turn answered other tools than those listed
            await ctx.session.send_tool_list_changed()
        return result

    async def list_resources(
        _ctx: Any, _params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=sandbox.resources())

    async def read_resource(_ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        return await anyio.to_thread.run_sync(sandbox.read, str(params.uri))

    return Server(
        MCP_SERVER_NAME,
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )


def sigterm_handler(sandbox: McpSandbox) -> Any:
    """SIGTERM (the SDK's client sends it when a server outlives its grace after stdin closed,
    and process managers send it): end the turn here, in the main thread, then exit at once.
    Leaving the event loop instead would hang: the stdio reader thread blocks on an open stdin."""

    def handle(_signum: int, _frame: Any) -> None:
        if sandbox.ending_here():
            return  # this thread is inside end() already: let it finish, the process then exits
        sandbox.end()
        os._exit(128 + signal.SIGTERM)

    return handle


def serve(
    *,
    connect: Connect,
    tenant_id: str,
    agent_id: str,
    template_id: str,
    turn_id: str | None = None,
    user_id: str | None = None,
) -> None:
    """Serve one MCP session on stdin/stdout until the client closes it (or SIGTERM). `connect`
    gives the Lambda client and dispatch's name, or raises DispatchUnavailable saying what to fix
    (the server serves anyway: each tool call then answers that)."""
    sandbox = McpSandbox(
        connect,
        tenant_id=tenant_id,
        agent_id=agent_id,
        template_id=template_id,
        turn_id=turn_id,
        user_id=user_id,
    )
    server = build_server(sandbox)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            options = server.create_initialization_options(NotificationOptions(tools_changed=True))
            await server.run(read_stream, write_stream, options)

    previous = signal.signal(signal.SIGTERM, sigterm_handler(sandbox))
    try:
        anyio.run(main)
    except KeyboardInterrupt:
        pass
    finally:
        sandbox.end()  # no-op when the lifespan already ended the turn
        signal.signal(signal.SIGTERM, previous)
