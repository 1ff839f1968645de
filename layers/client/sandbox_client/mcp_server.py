"""The sandbox as an MCP server over stdio (official `mcp` SDK), what `sandboxctl mcp` serves.

One MCP session = one turn: `begin_turn` when the session starts (the server's lifespan, before
the client's `initialize` is answered) and `end_turn` when it ends (stdin closed by the client,
or SIGTERM, which the SDK's client sends when a server outlives its 2 s grace), so the turn's
session is stopped with the MCP session and never left to the interpreter's timeout.

Tools: `execute_code` exactly as `begin_turn` declared it (the one tool definition, built by
dispatch), or none when the tenant/template has no sandbox (as §4.1 says).
Every argument the schema allows is passed to dispatch as is (so `files` reaches dispatch once
the tool definition declares it). Results:
- success: the dispatch answer as JSON text and as `structuredContent`, plus one MCP
  `resource_link` per artifact in the answer's `files` list (uri `sandbox-file://TENANT/FILE_ID`,
  name, MIME type, size), as the MCP spec allows for tool results;
- any `ok: false` answer, an input the schema refuses, or dispatch itself failing: a tool error
  (`isError: true`) whose text starts with the named class (`SandboxCapExceeded: ...`).
Resources (SPEC §14.3 through MCP): `resources/list` lists the artifacts of this session's calls
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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from .contract import FILE_ID_RE, FILE_NOT_FOUND, INVALID_REQUEST, MCP_SERVER_NAME
from .tool_input import failure_text, input_problem
from .turn import ArtifactMismatch, ArtifactUnavailable, DispatchUnavailable, SandboxTurn

FILE_URI_SCHEME = "sandbox-file"
_FILE_URI_RE = re.compile(rf"^{FILE_URI_SCHEME}://([^/]+)/([^/]+)$")
_TEXT_TYPES = ("application/json", "application/xml", "application/csv", "application/javascript")


def file_uri(tenant_id: str, file_id: str) -> str:
    return f"{FILE_URI_SCHEME}://{tenant_id}/{file_id}"


def _is_texty(content_type: str | None) -> bool:
    kind = (content_type or "").split(";")[0].strip().lower()
    return kind.startswith("text/") or kind in _TEXT_TYPES or kind.endswith("+json") or kind.endswith("+xml")


def resource_contents(
    uri: str, content_type: str | None, data: bytes
) -> types.TextResourceContents | types.BlobResourceContents:
    """One artifact's bytes as MCP resource contents: text when its type is textual and it is UTF-8."""
    if _is_texty(content_type):
        try:
            return types.TextResourceContents(uri=uri, mime_type=content_type, text=data.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    return types.BlobResourceContents(
        uri=uri, mime_type=content_type, blob=base64.b64encode(data).decode("ascii")
    )


def file_links(tenant_id: str, files: list[dict[str, Any]]) -> list[types.ResourceLink]:
    """The `files` list of an execute_code answer (§14.2) as MCP resource links."""
    return [
        types.ResourceLink(
            uri=file_uri(tenant_id, f["file_id"]),
            name=str(f.get("filename") or f["file_id"]),
            mime_type=f.get("content_type"),
            size=f.get("bytes"),
        )
        for f in files
        if f.get("file_id") and not f.get("skipped")
    ]


def _error(text: str, structured: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=text)], structured_content=structured, is_error=True
    )


class McpSandbox:
    """The turn behind one MCP session: begin once, end once (thread-safe), map each tool call."""

    def __init__(self, turn: SandboxTurn) -> None:
        self.turn = turn
        self.began: dict[str, Any] | None = None
        self.begin_error: str | None = None
        self.ended = False
        self._end_lock = threading.Lock()
        self._ending_thread: int | None = None
        self.artifacts: dict[str, types.ResourceLink] = {}  # uri -> link, this session's artifacts
        self._artifacts_lock = threading.Lock()

    def begin(self) -> None:
        try:
            self.began = self.turn.begin()
        except DispatchUnavailable as exc:
            self.begin_error = f"DispatchUnavailable: {exc}"
            print(f"sandboxctl mcp: begin_turn failed: {exc}", file=sys.stderr)

    def end(self) -> None:
        """end_turn once, whoever asks first (lifespan exit, the SIGTERM handler, serve's
        finally); a later caller waits for the first to finish, so the process never exits
        half-way through it."""
        with self._end_lock:
            if self.ended or self.began is None:
                return
            self.ended = True
            self._ending_thread = threading.get_ident()
            try:
                self.turn.end()
            except DispatchUnavailable as exc:
                print(f"sandboxctl mcp: end_turn failed: {exc}", file=sys.stderr)
            finally:
                self._ending_thread = None

    def ending_here(self) -> bool:
        """True while this very thread is inside end() (a signal handler interrupted it)."""
        return self._ending_thread == threading.get_ident()

    def tools(self) -> list[types.Tool]:
        tool = self.turn.tool
        if not tool:
            return []
        return [
            types.Tool(name=tool["name"], description=tool["description"], input_schema=tool["input_schema"])
        ]

    def unavailable(self) -> str:
        """Why there is no tool: begin_turn's own named error when it gave one."""
        return self.begin_error or self.turn.no_tool_reason()

    def call(self, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        tool = self.turn.tool
        if not tool:
            return _error(self.unavailable())
        if name != tool["name"]:
            return _error(f"{INVALID_REQUEST}: unknown tool {name!r}; this server has {tool['name']!r}")
        tool_input = arguments or {}
        problem = input_problem(tool_input, tool["input_schema"])
        if problem is not None:
            return _error(f"{INVALID_REQUEST}: {problem}")
        try:
            response = self.turn.execute_tool_input(tool_input)
        except DispatchUnavailable as exc:
            return _error(f"DispatchUnavailable: {exc}")
        text = failure_text(response)
        if text is not None:
            return _error(text, response)
        content: list[types.ContentBlock] = [types.TextContent(text=json.dumps(response, sort_keys=True))]
        links = file_links(self.turn.tenant_id, response.get("files") or [])
        content.extend(links)
        with self._artifacts_lock:
            self.artifacts.update((str(link.uri), link) for link in links)
        return types.CallToolResult(content=content, structured_content=response)

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
        if not match or not FILE_ID_RE.match(match.group(2)) or match.group(1) != self.turn.tenant_id:
            # Malformed, or another tenant's: the same answer as an unknown file_id (nothing leaks).
            raise MCPError(types.INVALID_PARAMS, f"{INVALID_REQUEST}: {FILE_NOT_FOUND}")
        try:
            answer, data = self.turn.fetch(match.group(2))
        except ArtifactUnavailable as exc:
            raise MCPError(types.INVALID_PARAMS, f"{exc.error}: {exc}") from None
        except ArtifactMismatch as exc:
            raise MCPError(types.INTERNAL_ERROR, f"SandboxError: {exc}") from None
        except DispatchUnavailable as exc:
            raise MCPError(types.INTERNAL_ERROR, f"DispatchUnavailable: {exc}") from None
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
        return types.ListToolsResult(tools=sandbox.tools())

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        # Blocking boto3 call: off the event loop, so pings and other calls are still answered.
        return await anyio.to_thread.run_sync(sandbox.call, params.name, params.arguments)

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
    lambda_client: Any,
    function_name: str,
    tenant_id: str,
    agent_id: str,
    template_id: str,
    turn_id: str | None = None,
    user_id: str | None = None,
) -> None:
    """Serve one MCP session on stdin/stdout until the client closes it (or SIGTERM)."""
    turn = SandboxTurn(
        function_name,
        tenant_id=tenant_id,
        agent_id=agent_id,
        template_id=template_id,
        turn_id=turn_id,
        user_id=user_id,
        lambda_client=lambda_client,
    )
    sandbox = McpSandbox(turn)
    server = build_server(sandbox)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    previous = signal.signal(signal.SIGTERM, sigterm_handler(sandbox))
    try:
        anyio.run(main)
    except KeyboardInterrupt:
        pass
    finally:
        sandbox.end()  # no-op when the lifespan already ended the turn
        signal.signal(signal.SIGTERM, previous)
