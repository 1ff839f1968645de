"""Helpers for the local Code Interpreter tests: the raw boto3 client and process inspection."""

from __future__ import annotations

import base64
import hashlib
import os
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
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


def build_wheel(directory: Path, name: str = "lci_probe", version: str = "1.0", value: int = 42) -> Path:
    """A pure-Python wheel of one module (`VALUE = value`), made here: installs offline."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VALUE = {value}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
        f"{len(text.encode())}"
        for path, text in files.items()
    ]
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel
