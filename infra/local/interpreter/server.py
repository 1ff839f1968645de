"""A local Amazon Bedrock AgentCore Code Interpreter data plane over HTTP on 127.0.0.1.

It speaks the `bedrock-agentcore` rest-json protocol exactly as the botocore service model
(`botocore/data/bedrock-agentcore/2024-02-28/service-2.json`) describes it, so the unmodified
boto3 client (and the official SDK, pointed here with its endpoint settings) works with only the
endpoint changed (request signatures are not checked):

| operation | HTTP (path under /code-interpreters/{id}) | inputs |
|---|---|---|
| StartCodeInterpreterSession | PUT sessions/start | body: name, sessionTimeoutSeconds, clientToken |
| InvokeCodeInterpreter | POST tools/invoke | header x-amzn-code-interpreter-session-id; body: name,
  arguments |
| StopCodeInterpreterSession | PUT sessions/stop | query sessionId |
| GetCodeInterpreterSession | GET sessions/get | query sessionId |
| ListCodeInterpreterSessions | POST sessions/list | body: maxResults, nextToken, status |

Every tool of the model's ToolName enum is implemented: executeCode (python; javascript and
typescript with Node.js, each call a fresh process sharing the session's files, as AgentCore's
`nodejs` runtime runs them), executeCommand, readFiles, writeFiles, listFiles, removeFiles, and the
background commands startCommandExecution (`arguments.command`) / getTask / stopTask
(`arguments.taskId`); the worker package (worker/) says what each does.
`{id}` may be a registered interpreter, its ARN, or `aws.codeinterpreter.v1`, AgentCore's system
interpreter and the SDK's default, built in as a PUBLIC interpreter of no tenant.

Errors are `x-amzn-errortype: <Name>` + JSON `{"message": ...}` with the model's HTTP status
(ResourceNotFoundException 404, ValidationException 400 with `reason`, ServiceQuotaExceeded 402,
InternalServerException 500). InvokeCodeInterpreter answers `application/vnd.amazon.eventstream`:
`result` events as AgentCore sends them (API reference, CodeInterpreterResult /
ToolResultStructuredContent): text content blocks with the output and a terminal event whose
`structuredContent` carries stdout, stderr, exitCode, taskStatus, executionTime (milliseconds,
as the API reference gives it), and taskId for the task tools, with `isError` true iff exitCode
!= 0 (or the tool failed). Output over one chunk is streamed as several content-only events
before the terminal one, so a client that counts text blocks *and* structured content counts
twice — exactly the bug the runner must not have. File tools' answers over one chunk are
streamed the same way, one content-only event per file, copied from the session's channel to the
socket in bounded pieces. A session whose answer breaks the channel's bounds is ended, and the
call answers exitCode 1 with the reason on stderr.

The control plane's CreateCodeInterpreter, GetCodeInterpreter, ListCodeInterpreters and
DeleteCodeInterpreter (the `bedrock-agentcore-control` client, which the local stack's exported
environment points here) answer 400 `UnsupportedOperationException` with a sentence naming the
local stack and what it offers instead: this interpreter serves the stage's interpreters only.

Local additions, not part of AgentCore: `GET /ping` (health, 200),
`POST /_local/interpreters` (`{"interpreterId": ..., "networkMode": "PUBLIC"|"SANDBOX"|"VPC"}`),
`GET /_local/isolation` (the isolation in force, isolation.IsolationPlan.describe), the response
headers `x-sandbox-local-stdout-bytes` / `-stderr-bytes` (exact byte counts), and Start
refused with AccessDeniedException (403) `isolation_unavailable: ...` when the session cannot be
isolated (docs/local-stack.md).

Sources (checked with the docs search, Nov 2026):
- URIs, locations, shapes, error statuses: the botocore model above (the source of truth here).
- Result event shape: docs.aws.amazon.com/bedrock-agentcore/latest/APIReference/
  API_CodeInterpreterResult.html and API_CodeInterpreterStreamOutput.html; executionTime's unit:
  API_ToolResultStructuredContent.html ("in milliseconds", as the botocore model says). A public
  project's recorded live response shows `"executionTime": 0.07` for a trivial call, which reads
  like seconds: the reference is followed here.
- Lifecycle: StopCodeInterpreterSession doc ("Once stopped, a session cannot be restarted"); the
  devguide's code-interpreter-session-characteristics page (900 s default, several independent
  sessions per interpreter); statuses READY|TERMINATED (model enum, boto/boto3#4701).
Assumed where nothing public says it (change here if AWS is observed to differ): error message
texts; `taskStatus` "failed" for a non-zero exit; which text goes in content blocks (stdout, then
stderr); Stop of an already-terminated session → ResourceNotFoundException; `runtime` deno →
ValidationException (AgentCore offers it; this local one runs Node.js only); the task tools'
answers (start: taskStatus `working`; getTask of a running task: its output so far, no exitCode;
an unknown taskId: a tool error, isError true, naming it).
"""

from __future__ import annotations

import itertools
import json
import logging
import struct
import threading
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from sandbox_common import naming

from infra.local.eventstream import event_payload_head
from infra.local.interpreter.answers import ClientGone, InvokeOutcome, ProtocolViolation
from infra.local.interpreter.egress import EgressProxy
from infra.local.interpreter.isolation import IsolationUnavailable, Limits
from infra.local.interpreter.protocol import (
    CHUNK_CHARS,
    CONTROL_PLANE,
    EVENTSTREAM,
    MAX_BODY,
    SESSION_HEADER,
    SESSION_ID_RE,
    TOOLS,
    ApiError,
    json_default,
    not_found,
    outcome_failed,
    result_events,
    unsupported,
    validate_arguments,
    validation,
)
from infra.local.interpreter.registry import NETWORK_MODES
from infra.local.interpreter.s3relay import DataGrant
from infra.local.interpreter.session import READY, TERMINATED, NotFound, QuotaExceeded, Session
from infra.local.interpreter.sessions import MAX_SESSION_TIMEOUT, SessionManager
from infra.local.interpreter.uids import UidAllocator
from infra.local.interpreter.worker.frames import MAX_BLOCK, Frame
from infra.local.interpreter.worker_process import WorkerFailure

log = logging.getLogger("local-interpreter")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as botocore's connection pool expects
    # TCP_NODELAY: a response is several small writes (headers, then one chunk per event); with
    # Nagle's algorithm each write after the first waits for the client's delayed ACK. Measured
    # here: an executeCode of `pass` took 44-48 ms with it, 4-9 ms without.
    disable_nagle_algorithm = True
    server_version = "LocalAgentCoreCodeInterpreter/1.0"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s - " + format, self.address_string(), *args)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("GET")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    # --- plumbing -------------------------------------------------------------------------------
    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.close_connection = True
            raise validation(f"Request body exceeds {MAX_BODY} bytes")
        return self.rfile.read(length) if length else b""

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _send_json(self, obj: Any, status: int = 200) -> None:
        body = json.dumps({k: v for k, v in obj.items() if v is not None}, default=json_default).encode()
        self._send(status, body, "application/json")

    def _send_error(self, err: ApiError) -> None:
        body = json.dumps({"message": err.message, **err.extra}).encode()
        self._send(err.status, body, "application/json", {"x-amzn-errortype": err.error_type})

    def _send_stream(
        self, session_id: str, frames: list[bytes], headers: dict[str, str] | None = None
    ) -> None:
        self._begin_stream(session_id, headers or {})
        self._write_events(frames)

    def _begin_stream(self, session_id: str, headers: dict[str, str]) -> None:
        self.send_response(200)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Type", EVENTSTREAM)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        self.send_header(SESSION_HEADER, session_id)
        self.end_headers()

    def _write_events(self, frames: list[bytes]) -> None:
        """The rest of the stream: one HTTP chunk per event, as a streaming service sends them."""
        for frame in frames:
            if len(frame) <= CHUNK_CHARS:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            else:  # megabytes (file tools): no copy of the frame to frame it
                self.wfile.write(b"%x\r\n" % len(frame))
                self.wfile.write(frame)
                self.wfile.write(b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def _dispatch(self, method: str) -> None:
        try:
            url = urlsplit(self.path)
            body = self._read_body()
            parts = [unquote(p) for p in url.path.strip("/").split("/")]
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            if method == "GET" and parts == ["ping"]:
                self._send_json({"status": "ok"})
                return
            if method == "GET" and parts == ["_local", "isolation"]:
                self._send_json(self._manager.plan.describe(self._manager.limits))
                return
            if method == "POST" and parts == ["_local", "interpreters"]:
                self._register(self._json(body))
                return
            if len(parts) == 4 and parts[0] == "code-interpreters":
                route = (method, parts[2], parts[3])
                handler = {
                    ("PUT", "sessions", "start"): self._start,
                    ("PUT", "sessions", "stop"): self._stop,
                    ("GET", "sessions", "get"): self._get,
                    ("POST", "sessions", "list"): self._list,
                    ("POST", "tools", "invoke"): self._invoke,
                }.get(route)
                if handler is not None:
                    handler(parts[1], self._json(body), query)
                    return
            if parts[0] == "code-interpreters" and (method, len(parts)) in CONTROL_PLANE:
                raise unsupported(CONTROL_PLANE[(method, len(parts))])
            raise ApiError(404, "UnknownOperationException", f"No operation for {method} {url.path}")
        except ApiError as err:
            self._send_error(err)
        except NotFound as exc:
            self._send_error(not_found(str(exc)))
        except QuotaExceeded as exc:
            self._send_error(ApiError(402, "ServiceQuotaExceededException", str(exc)))
        except IsolationUnavailable as exc:
            # Refused before anything was created; the message starts with `isolation_unavailable`
            # (the runner's marker). 403: a refusal the client must not retry.
            self._send_error(ApiError(403, "AccessDeniedException", str(exc)))
        except WorkerFailure as exc:
            self._send_error(ApiError(500, "InternalServerException", str(exc)))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # never a stack trace on the wire
            log.exception("unexpected error")
            self._send_error(
                ApiError(500, "InternalServerException", f"Internal error: {type(exc).__name__}")
            )

    def _json(self, body: bytes) -> dict[str, Any]:
        if not body.strip():
            return {}
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise validation("Request body is not valid JSON", reason="CannotParse") from exc
        if not isinstance(data, dict):
            raise validation("Request body must be a JSON object", reason="CannotParse")
        return data

    @property
    def _manager(self) -> SessionManager:
        return self.server.manager

    def _session_id(self, value: Any, field: str = "sessionId") -> str:
        if not value:
            raise validation(f"{field} is required", field)
        if not isinstance(value, str) or not SESSION_ID_RE.match(value):
            raise validation(f"{field} must match [0-9a-zA-Z]{{1,40}}", field)
        return value

    # --- operations -----------------------------------------------------------------------------
    def _start(self, identifier: str, body: dict[str, Any], query: dict[str, str]) -> None:
        timeout = body.get("sessionTimeoutSeconds")
        if timeout is not None and (
            not isinstance(timeout, int)
            or isinstance(timeout, bool)
            or not 1 <= timeout <= MAX_SESSION_TIMEOUT
        ):
            raise validation(
                f"sessionTimeoutSeconds must be an integer in 1..{MAX_SESSION_TIMEOUT}",
                "sessionTimeoutSeconds",
            )
        name = body.get("name")
        if name is not None and (not isinstance(name, str) or not 1 <= len(name) <= 100):
            raise validation("name must be 1..100 characters", "name")
        session = self._manager.start(
            identifier, name=name, timeout_seconds=timeout, client_token=body.get("clientToken")
        )
        self._send_json(
            {
                "codeInterpreterIdentifier": session.interpreter_id,
                "sessionId": session.session_id,
                "createdAt": session.created_at,
            }
        )

    def _stop(self, identifier: str, body: dict[str, Any], query: dict[str, str]) -> None:
        session = self._manager.stop(identifier, self._session_id(query.get("sessionId")))
        self._send_json(
            {
                "codeInterpreterIdentifier": session.interpreter_id,
                "sessionId": session.session_id,
                "lastUpdatedAt": session.last_updated_at,
            }
        )

    def _get(self, identifier: str, body: dict[str, Any], query: dict[str, str]) -> None:
        session = self._manager.get(identifier, self._session_id(query.get("sessionId")))
        # Members of GetCodeInterpreterSessionResponse only (no lastUpdatedAt there).
        self._send_json({k: v for k, v in session.describe().items() if k != "lastUpdatedAt"})

    def _list(self, identifier: str, body: dict[str, Any], query: dict[str, str]) -> None:
        status = body.get("status")
        if status is not None and status not in (READY, TERMINATED):
            raise validation("status must be READY or TERMINATED", "status")
        max_results = body.get("maxResults") or 10
        if not isinstance(max_results, int) or not 1 <= max_results <= 100:
            raise validation("maxResults must be in 1..100", "maxResults")
        sessions = self._manager.list(identifier, status)
        start = int(body.get("nextToken") or 0) if str(body.get("nextToken") or "0").isdigit() else 0
        page = sessions[start : start + max_results]
        items = [{k: v for k, v in s.describe().items() if k != "sessionTimeoutSeconds"} for s in page]
        token = str(start + max_results) if start + max_results < len(sessions) else None
        self._send_json({"items": items, "nextToken": token})

    def _invoke(self, identifier: str, body: dict[str, Any], query: dict[str, str]) -> None:
        self._manager.resolve_interpreter(identifier)  # unknown interpreter first, as AgentCore
        name = body.get("name")
        if not name:
            raise validation("name is required", "name")
        if name not in TOOLS:
            raise validation(f"name must be one of {', '.join(TOOLS)}", "name")
        arguments = body.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise validation("arguments must be an object", "arguments")
        session = self._manager.active(identifier, self._session_id(self.headers.get(SESSION_HEADER)))
        validate_arguments(name, arguments)
        streaming: list[bool] = []

        def stream(outcome: InvokeOutcome, frame: Frame) -> None:
            """A file tool's large answer: one event per content block, each block copied from the
            worker's channel to the socket in bounded pieces (never held whole)."""
            streaming.append(True)
            self._begin_stream(session.session_id, {})
            flag = b"true" if outcome_failed(outcome) else b"false"
            prefix, suffix = b'{"content": [', b'], "isError": ' + flag + b"}"
            bound = MAX_BLOCK if name == "readFiles" else 64 * 1024
            try:
                while (length := frame.next_block(bound)) is not None:
                    head, total = event_payload_head("result", len(prefix) + length + len(suffix))
                    self.wfile.write(b"%x\r\n%s" % (total, head))
                    crc = zlib.crc32(head)
                    for piece in itertools.chain((prefix,), frame.read_pieces(length), (suffix,)):  # lazily
                        crc = zlib.crc32(piece, crc)
                        self.wfile.write(piece)
                    self.wfile.write(struct.pack(">I", crc & 0xFFFFFFFF) + b"\r\n")
            except OSError as exc:  # the caller's socket (a broken channel is a ProtocolError)
                raise ClientGone() from exc

        try:
            outcome = self._manager.invoke(session, name, arguments, on_blocks=stream)
        except ProtocolViolation as exc:
            if streaming:  # the answer is already on its way: end it broken, never complete
                self.close_connection = True
                return
            outcome = InvokeOutcome(stdout="", stderr=f"{exc}\n", exit_code=1, execution_time=0.0, died=True)
        except ClientGone:
            self.close_connection = True
            return
        if streaming:
            outcome.content_blocks = []  # sent: only the terminal event is left
            frames = result_events(outcome)
            self._write_events(frames[-1:])
            return
        frames = result_events(outcome)
        # Local addition: the exact byte counts the code wrote. The worker keeps only the
        # first Limits.stdout_kept / stderr_kept bytes of each stream, so the text alone would
        # undercount; the model's structuredContent has no member for a count (botocore drops
        # unknown members), response headers reach the client as ResponseMetadata.HTTPHeaders.
        counts = {
            naming.LOCAL_STDOUT_BYTES_HEADER: outcome.stdout_bytes,
            naming.LOCAL_STDERR_BYTES_HEADER: outcome.stderr_bytes,
        }
        self._send_stream(session.session_id, frames, {k: str(v) for k, v in counts.items() if v is not None})

    def _register(self, body: dict[str, Any]) -> None:
        interpreter_id, mode = body.get("interpreterId"), body.get("networkMode")
        if not isinstance(interpreter_id, str) or mode not in NETWORK_MODES:
            raise validation(f"interpreterId and networkMode ({'|'.join(NETWORK_MODES)}) are required")
        try:
            self._manager.register_interpreter(interpreter_id, mode)
        except ValueError as exc:
            raise validation(str(exc), "interpreterId") from exc
        self._send_json({"interpreterId": interpreter_id, "networkMode": mode})


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], manager: SessionManager) -> None:
        super().__init__(address, _Handler)
        self.manager = manager


class LocalInterpreterServer:
    """The local AgentCore Code Interpreter.

    >>> server = LocalInterpreterServer(interpreters={"sbx_local_acme_pub": "PUBLIC"}).start()
    >>> boto3.client("bedrock-agentcore", endpoint_url=server.endpoint)  # doctest: +SKIP
    >>> server.stop()
    """

    def __init__(
        self,
        port: int = 0,
        *,
        interpreters: dict[str, str] | None = None,
        registry_file: str | None = None,
        limits: Limits | None = None,
        isolation: str = "auto",
        allow_unisolated: bool | None = None,
        python: str | None = None,
        max_sessions: int = 64,
        reap_interval: float = 0.2,
        disk_kind: str = "auto",
        uids: UidAllocator | None = None,
        data_grants: dict[str, DataGrant] | None = None,
        egress_proxy: EgressProxy | None = None,
    ) -> None:
        self._port = port
        # The local egress proxy and its CA certificate: a VPC session's way out (egress.py).
        self.egress_proxy = egress_proxy
        self.manager = SessionManager(
            interpreters=interpreters,
            registry_file=registry_file,
            limits=limits,
            isolation_strategy=isolation,
            allow_unisolated=allow_unisolated,
            python=python,
            max_sessions=max_sessions,
            reap_interval=reap_interval,
            disk_kind=disk_kind,
            uids=uids,
            data_grants=data_grants,
            egress_proxy=egress_proxy,
        )
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def isolation(self) -> str:
        return self.manager.isolation

    def register_interpreter(
        self, interpreter_id: str, network_mode: str, data: DataGrant | None = None
    ) -> None:
        self.manager.register_interpreter(interpreter_id, network_mode, data)

    def attach_egress(self, proxy: EgressProxy) -> None:
        """The egress proxy VPC sessions started from now on reach (sessions.SessionManager)."""
        self.egress_proxy = proxy
        self.manager.attach_egress(proxy)

    def session(self, session_id: str) -> Session | None:
        """Introspection for the local stack and tests (state, termination reason, process)."""
        return self.manager.lookup(session_id)

    def start(self) -> LocalInterpreterServer:
        self._httpd = _HTTPServer(("127.0.0.1", self._port), self.manager)
        # A short shutdown poll: stop() waits up to one interval (the stdlib default is 0.5 s).
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="lci-http", daemon=True
        )
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("server not started")
        return int(self._httpd.server_address[1])

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        self.manager.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> LocalInterpreterServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
