"""One warm "execution environment" of the local Lambda emulator: a subprocess that imports the
function's handler once and then serves invocations, one at a time, like a Lambda container.

Started by `lambda_emulator` as `python lambda_worker.py TASK_ROOT LAYER_ROOT HANDLER` with exactly
the function's environment. Protocol: one JSON line per request on stdin, one JSON line per
response on a private copy of the original stdout; fd 1 itself is pointed at stderr so that
whatever the handler prints (Powertools logs, print) goes to the log stream, not into the protocol.
Stdlib only, so nothing but the function's own imports is loaded.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from typing import Any


class LambdaContext:
    """The attributes and method of the Python runtime's context object that handlers use."""

    def __init__(self, request: dict[str, Any]) -> None:
        self.function_name: str = request["function_name"]
        self.function_version = "$LATEST"
        self.invoked_function_arn: str = request["invoked_function_arn"]
        self.memory_limit_in_mb: int = int(request["memory_limit_in_mb"])
        self.aws_request_id: str = request["request_id"]
        self.log_group_name: str = request["log_group_name"]
        self.log_stream_name: str = request["log_stream_name"]
        self.identity = None
        self.client_context = None
        self._deadline_ms: int = int(request["deadline_ms"])

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline_ms - int(time.time() * 1000))


def _error_body(exc: BaseException, request_id: str) -> dict[str, Any]:
    # The same shape the Lambda Python runtime returns for an unhandled exception.
    return {
        "errorMessage": str(exc),
        "errorType": type(exc).__name__,
        "requestId": request_id,
        "stackTrace": [
            line.rstrip("\n")
            for line in traceback.format_tb(exc.__traceback__.tb_next if exc.__traceback__ else None)
        ],
    }


def serve(handler_path: str, proto_in: Any, proto_out: Any) -> None:
    module_name, _, func_name = handler_path.rpartition(".")
    handler = None
    init_error: dict[str, Any] | None = None
    try:
        handler = getattr(importlib.import_module(module_name), func_name)
    except Exception as exc:  # noqa: BLE001 - Lambda reports init failures on every invoke
        init_error = {
            "errorMessage": f"Unable to import module '{module_name}': {exc}",
            "errorType": "Runtime.ImportModuleError",
            "stackTrace": [],
        }
        traceback.print_exc()
    proto_out.write(json.dumps({"ready": True}) + "\n")
    proto_out.flush()
    while True:
        line = proto_in.readline()
        if not line:
            return
        request = json.loads(line)
        if init_error is not None:
            response: dict[str, Any] = {
                "ok": False,
                "error": {**init_error, "requestId": request["request_id"]},
            }
        else:
            try:
                event = json.loads(request["payload"]) if request["payload"] else {}
                result = handler(event, LambdaContext(request))  # type: ignore[misc]
                response = {"ok": True, "payload": json.dumps(result)}
            except Exception as exc:  # noqa: BLE001 - becomes X-Amz-Function-Error: Unhandled
                traceback.print_exc()
                response = {"ok": False, "error": _error_body(exc, request["request_id"])}
        sys.stdout.flush()
        sys.stderr.flush()
        proto_out.write(json.dumps(response) + "\n")
        proto_out.flush()


def main(argv: list[str]) -> int:
    task_root, layer_root, handler_path = argv
    # Lambda's import path: the function code (/var/task) and the layer (/opt/python) first; the
    # directory of this script must not leak in as an import root.
    sys.path[0:1] = [task_root, layer_root]
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    serve(handler_path, sys.stdin, proto_out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
