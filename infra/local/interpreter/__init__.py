"""Local Amazon Bedrock AgentCore Code Interpreter: the real `bedrock-agentcore` wire
protocol on 127.0.0.1, one sandboxed persistent Python process per session.

    server = LocalInterpreterServer(interpreters={"sbx_local_acme_pub": "PUBLIC"}).start()
    client = boto3.client("bedrock-agentcore", endpoint_url=server.endpoint)
    ...
    server.stop()

or, as a process: `python -m infra.local.interpreter --port N [--registry FILE]`.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from infra.local.interpreter.isolation import IsolationUnavailable, Limits
from infra.local.interpreter.server import LocalInterpreterServer

__all__ = ["IsolationUnavailable", "Limits", "LocalInterpreterServer", "wait_ready"]


def wait_ready(endpoint: str, timeout: float = 10.0, interval: float = 0.05) -> None:
    """Block until `GET {endpoint}/ping` answers 200; TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{endpoint.rstrip('/')}/ping", timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = exc
        time.sleep(interval)
    raise TimeoutError(f"local interpreter at {endpoint} not ready after {timeout}s: {last}")
