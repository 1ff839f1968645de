"""The official `bedrock-agentcore` SDK against the running local stack, configured only by the
environment `sandboxctl local up` prints ("point boto3 at it"): JavaScript and TypeScript run in the
default interpreter's sessions, and the control-plane calls the local stack does not offer answer a
ClientError saying so — not moto's HTML 500."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from infra.local.state import LocalState

SCRIPT = r"""
import json
from botocore.exceptions import ClientError
from bedrock_agentcore.tools.code_interpreter_client import code_session

def stdout(response):
    events = [e["result"] for e in response["stream"] if "result" in e]
    return events[-1]["structuredContent"]["stdout"]

report = {}
with code_session("us-east-1") as client:
    report["javascript"] = stdout(client.execute_code("console.log(6*7)", language="javascript"))
    typed = "const n: number = 6 * 7; console.log(n)"
    report["typescript"] = stdout(client.execute_code(typed, language="typescript"))
    try:
        client.list_code_interpreters()
        report["list"] = "answered"
    except ClientError as exc:
        report["list"] = [exc.response["Error"]["Code"], exc.response["Error"]["Message"],
                          exc.response["ResponseMetadata"]["HTTPStatusCode"]]
print(json.dumps(report))
"""


def test_the_sdk_configured_by_local_ups_environment_runs_js_and_names_what_it_lacks(
    state: LocalState,
) -> None:
    # Given a shell that exported what `sandboxctl local up` prints, and nothing else of AWS
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "BEDROCK_AGENTCORE_", "SANDBOX_"))
    }
    env.update(state.client_environment())
    # When the SDK runs JavaScript and TypeScript, then asks the control plane for interpreters
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.splitlines()[-1])
    # Then both programs ran, and the control plane's answer is a ClientError naming the local stack
    assert (report["javascript"], report["typescript"]) == ("42\n", "42\n")
    code, message, status = report["list"]
    assert (code, status) == ("UnsupportedOperationException", 400)
    assert "ListCodeInterpreters" in message and "sandboxctl local up" in message
