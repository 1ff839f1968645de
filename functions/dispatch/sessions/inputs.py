"""Files in: a call's input files written into its session before the user code.

Inline files go in with one `writeFiles` call (binary-safe blobs). `s3_uri` files are copied
*inside the session* by a helper snippet that uses the interpreter's execution role (boto3's
default credentials there: the role AgentCore gives the session), so neither dispatch nor the
session-runner role ever reads tenant data; dispatch has already checked that every uri lies
under the tenant's `data.read` prefixes (sandbox_common.files.check_s3_inputs) and the execution
role can reach nothing else. The snippet refuses an object over 100 MiB before downloading it.
When S3 refuses an object (HEAD answers 403 or 404), the snippet answers the error's code and
the call fails as `inputs:s3:<code>` (`inputs:s3:AccessDenied`, `inputs:s3:NoSuchKey`).

`place_inputs(runner, interpreter_id, session_id, request)` places them (the session stage calls it
after the session is there, before the code: on failure the code must not run — SandboxError,
failure_reason `inputs:...`) and returns the audit row's `input_files` (path, bytes, sha256);
`write_inputs` is the placing itself.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sandbox_common import limits
from sandbox_common.errors import SandboxError
from sandbox_common.files import InputFile, input_record, parse_s3_uri
from sandbox_common.models import ExecuteCodeRequest
from sandbox_runtime.runner import SessionRunner
from sandbox_runtime.runner.tools import SessionFiles, ToolFailed

ANSWER_PATH = ".sandbox/inputs.json"
INPUTS_FAILED_MESSAGE = (
    "The input files could not be placed in the sandbox, so no code was run; please check them and try again."
)
S3_ERROR_CODE = re.compile(r"[A-Za-z0-9]{1,64}")  # AccessDenied, NoSuchKey, ...: no free text

_COPY_SOURCE = r"""
def __sandbox_copy_inputs(items, answer, max_bytes):
    import hashlib, json, os
    import boto3
    from botocore.exceptions import ClientError
    s3 = boto3.client("s3")
    records = []
    os.makedirs(os.path.dirname(answer), exist_ok=True)
    for path, bucket, key in items:
        try:
            head = s3.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = {403: "AccessDenied", 404: "NoSuchKey"}.get(status, exc.response["Error"].get("Code"))
            with open(answer, "w") as fh:
                json.dump({"error": str(code)}, fh)
            return
        if head["ContentLength"] > max_bytes:
            size = head["ContentLength"]
            raise ValueError("%s is %d bytes, over the %d-byte limit" % (path, size, max_bytes))
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        s3.download_file(bucket, key, path)
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        records.append({"path": path, "bytes": os.path.getsize(path), "sha256": digest.hexdigest()})
    with open(answer, "w") as fh:
        json.dump(records, fh)

__sandbox_copy_inputs(__ARGS__)
del __sandbox_copy_inputs
"""


class InputsFailed(Exception):
    """The inputs could not be placed in the session; the user code must not run."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def copy_source(items: list[tuple[str, str, str]], max_bytes: int = limits.MAX_S3_INPUT_BYTES) -> str:
    args = ", ".join(json.dumps(v) for v in (items, ANSWER_PATH, max_bytes))
    return _COPY_SOURCE.replace("__ARGS__", args)


def write_inputs(
    files: SessionFiles, interpreter_id: str, session_id: str, inputs: list[InputFile] | None
) -> list[dict[str, Any]]:
    """Place every input; return their records in request order. Raises InputsFailed."""
    if not inputs:
        return []
    inline = [(f.path, f.data) for f in inputs if f.content_base64 is not None]
    remote = [(f.path, *parse_s3_uri(f.s3_uri)) for f in inputs if f.s3_uri is not None]
    records = {path: input_record(path, data) for path, data in inline}
    try:
        files.write(interpreter_id, session_id, inline)
        if remote:
            copied = files.run_helper(interpreter_id, session_id, copy_source(remote), ANSWER_PATH)
            if isinstance(copied, dict):  # S3 refused one object: its error code, checked (session text)
                code = str(copied.get("error"))
                raise InputsFailed(f"inputs:s3:{code if S3_ERROR_CODE.fullmatch(code) else 'unknown'}")
            records.update(
                {
                    str(r["path"]): {"path": r["path"], "bytes": int(r["bytes"]), "sha256": r["sha256"]}
                    for r in copied
                }
            )
    except ToolFailed as exc:
        raise InputsFailed(f"inputs:{exc.reason}") from None
    except (KeyError, TypeError, ValueError):
        raise InputsFailed("inputs:malformed_answer") from None
    return [records[f.path] for f in inputs if f.path in records]


def place_inputs(
    runner: SessionRunner, interpreter_id: str, session_id: str, request: ExecuteCodeRequest
) -> list[dict[str, Any]]:
    """The request's input files in the session, through the runner's file tools; raises
    SandboxError (the code must not run) when they could not be placed."""
    try:
        return write_inputs(runner.files, interpreter_id, session_id, request.files)
    except InputsFailed as exc:
        raise SandboxError(INPUTS_FAILED_MESSAGE, failure_reason=exc.reason) from None
