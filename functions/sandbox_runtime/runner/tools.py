"""AgentCore Code Interpreter file tools, called through the tenant's session-runner credentials
(docs/files.md): `writeFiles` for input files, `readFiles` for artifacts, and small `executeCode`
helpers whose answers travel in files (never in stdout, which the in-sandbox redactor rewrites).

Same two locks as the session runner: the interpreter id is checked against the tenant's
own list before any AWS call, and every call uses the tenant's runner credentials.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from .credentials import TenantCredentials
from .errors import CrossTenantInterpreter

WRITE_FILES = "writeFiles"
READ_FILES = "readFiles"
EXECUTE_CODE = "executeCode"


class ToolFailed(Exception):
    """A file tool answered isError, an exception event, or nothing usable."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class ToolAnswer:
    """Content blocks of every `result` event, the last structuredContent, isError."""

    content: list[dict[str, Any]] = field(default_factory=list)
    structured: dict[str, Any] = field(default_factory=dict)
    is_error: bool = False

    def text(self) -> str:
        return "".join(str(b.get("text", "")) for b in self.content if b.get("type") == "text")

    def resources(self) -> dict[str, bytes]:
        """readFiles resources keyed by their URI's path part (`file://a.csv` -> `a.csv`)."""
        found: dict[str, bytes] = {}
        for block in self.content:
            resource = block.get("resource") if block.get("type") == "resource" else None
            if not isinstance(resource, dict):
                continue
            uri = str(resource.get("uri", ""))
            path = uri[len("file://") :] if uri.startswith("file://") else uri
            if resource.get("blob") is not None:
                blob = resource["blob"]
                found[path] = blob if isinstance(blob, bytes) else base64.b64decode(blob)
            elif resource.get("text") is not None:
                found[path] = str(resource["text"]).encode("utf-8")
        return found


class SessionFiles:
    """File tools on one tenant's sessions. `credentials` is the runner's TenantCredentials."""

    def __init__(
        self, *, tenant_id: str, allowed_interpreter_ids: frozenset[str], credentials: TenantCredentials
    ) -> None:
        self.tenant_id = tenant_id
        self.allowed_interpreter_ids = allowed_interpreter_ids
        self.credentials = credentials

    def call(self, interpreter_id: str, session_id: str, name: str, arguments: dict[str, Any]) -> ToolAnswer:
        from botocore.eventstream import ParserError
        from botocore.exceptions import BotoCoreError, ClientError  # lazy: cold start (as session.py)
        from botocore.parsers import ResponseParserError

        if interpreter_id not in self.allowed_interpreter_ids:
            raise CrossTenantInterpreter("The code sandbox is not available for this request.")
        answer = ToolAnswer()
        try:
            response = self.credentials.invoke_client().invoke_code_interpreter(
                codeInterpreterIdentifier=interpreter_id, sessionId=session_id, name=name, arguments=arguments
            )
            for event in response["stream"]:
                result = event.get("result") if isinstance(event, dict) else None
                if not isinstance(result, dict):
                    continue
                answer.content.extend(b for b in result.get("content") or [] if isinstance(b, dict))
                if isinstance(result.get("structuredContent"), dict):
                    answer.structured = result["structuredContent"]
                answer.is_error = answer.is_error or bool(result.get("isError"))
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "Unknown")
            raise ToolFailed(f"{name}_failed:{code}") from None
        except BotoCoreError as exc:  # EventStreamError is a ClientError; this is transport
            raise ToolFailed(f"{name}_failed:{type(exc).__name__}") from None
        except (RecursionError, ValueError, ParserError, ResponseParserError) as exc:  # an unreadable stream
            raise ToolFailed(f"{name}_failed:protocol_error:{type(exc).__name__}") from None
        if answer.is_error:
            raise ToolFailed(f"{name}_failed:is_error")
        return answer

    def write(self, interpreter_id: str, session_id: str, files: list[tuple[str, bytes]]) -> None:
        """writeFiles, binary-safe (`blob`; botocore base64-encodes bytes on the wire)."""
        if not files:
            return
        self.call(
            interpreter_id,
            session_id,
            WRITE_FILES,
            {"content": [{"path": path, "blob": data} for path, data in files]},
        )

    def read(self, interpreter_id: str, session_id: str, paths: list[str]) -> dict[str, bytes]:
        """readFiles; every asked path must come back, else ToolFailed."""
        if not paths:
            return {}
        found = self.call(interpreter_id, session_id, READ_FILES, {"paths": paths}).resources()
        missing = [p for p in paths if p not in found]
        if missing:
            raise ToolFailed(f"readFiles_failed:missing:{len(missing)}")
        return found

    def run_helper(self, interpreter_id: str, session_id: str, code: str, answer_path: str) -> Any:
        """Run one of our helper snippets, then read the JSON it wrote to `answer_path`."""
        result = self.call(interpreter_id, session_id, EXECUTE_CODE, {"language": "python", "code": code})
        exit_code = result.structured.get("exitCode")
        if exit_code not in (None, 0):
            raise ToolFailed(f"helper_failed:exit_code:{exit_code}")
        raw = self.read(interpreter_id, session_id, [answer_path])[answer_path]
        try:
            return json.loads(raw)
        except ValueError:
            raise ToolFailed("helper_failed:unreadable_answer") from None
