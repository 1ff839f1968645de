"""Helpers for the local Code Interpreter tests: the raw boto3 client and process inspection."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config

PUBLIC_CI = "sbx_test_acme_pub"
SANDBOX_CI = "sbx_test_acme_int"
OTHER_CI = "sbx_test_globex_pub"


def make_client(endpoint: str) -> Any:
    # No retries: a 5xx must surface as the error it is, not be retried into a slow test.
    return boto3.client(
        "bedrock-agentcore",
        endpoint_url=endpoint,
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=60),
    )


def invoke(
    client: Any,
    interpreter: str,
    session_id: str,
    code: str,
    name: str = "executeCode",
    arguments: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """(terminal structuredContent, every result event, response metadata headers)."""
    args = arguments if arguments is not None else {"language": "python", "code": code}
    response = client.invoke_code_interpreter(
        codeInterpreterIdentifier=interpreter, sessionId=session_id, name=name, arguments=args
    )
    events = [event["result"] for event in response["stream"]]
    structured = [e["structuredContent"] for e in events if "structuredContent" in e]
    assert len(structured) == 1, events  # exactly one terminal event
    assert "structuredContent" in events[-1]  # and it is the last one
    return structured[0], events, response["ResponseMetadata"]["HTTPHeaders"]


def session_pids(session_id: str) -> list[int]:
    """Host pids of live (non-zombie) processes whose command line names the session."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if session_id.encode() in cmdline:
            found.append(int(entry))
    return found


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()
