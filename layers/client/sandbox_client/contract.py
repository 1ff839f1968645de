"""What the client must spell exactly as dispatch does.

The client's only dependency is boto3, so it cannot import the Lambdas' common package; each name
it shares with dispatch is stated here once for the client, and tests/unit/client/test_contract.py
checks that every one equals dispatch's own. Everything else the client shows the model (the tool
definition) comes from dispatch's answers, never rebuilt here. The MCP server's name is the
client's alone.
"""

from __future__ import annotations

import re
import secrets

STATUS_TOOL_CALL = "tool_call"  # an execute_code answer paused at a tool call
# Named error classes (an answer's `error`): the governance refusals the client raises as
# exceptions (errors.SandboxRefused), and the class it puts on a failure it words itself.
INVALID_REQUEST = "SandboxInvalidRequest"
PROVISIONING = "SandboxProvisioning"
CAP_EXCEEDED = "SandboxCapExceeded"
SANDBOX_ERROR = "SandboxError"
# The `reason` of an invalid request whose turn_token was missing or did not match.
REASON_TURN_TOKEN_MISMATCH = "turn_token_mismatch"
# The tools of the one surface (docs/tool-surface.md): the client maps a call of each to its dispatch action;
# their definitions are begin_turn's, never the client's.
EXECUTE_CODE = "execute_code"
RUN_COMMAND = "run_command"  # execute_code with `language` COMMAND_LANGUAGE and `code` = the command
GET_JOB = "get_job"
CANCEL_JOB = "cancel_job"
COMMAND_LANGUAGE = "bash"
MAX_CODE_BYTES = 256 * 1024  # user code, UTF-8 bytes (dispatch refuses more)
FILE_ID_RE = re.compile(r"^file-[A-Za-z0-9_-]{22,64}$")  # an artifact's file_id (docs/files.md)
FILE_NOT_FOUND = "Invalid request: no file with this file_id exists for this workspace."
MCP_SERVER_NAME = "thinkwork-sandbox"  # the name the MCP server gives its hosts
# botocore's `max_attempts` counts retries; only `total_max_attempts` counts attempts: calls that
# count, run code or are the caller's to retry are sent exactly once.
SINGLE_ATTEMPT = {"mode": "standard", "total_max_attempts": 1}
TOKEN_BYTES = 32  # secrets.token_urlsafe(32): 43 characters, the shortest valid turn token


def new_token() -> str:
    """A fresh turn token (docs/sessions.md): 32 random bytes, URL-safe base64 without padding."""
    return secrets.token_urlsafe(TOKEN_BYTES)
