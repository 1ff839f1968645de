"""The local stack's own names."""

from __future__ import annotations

# The local interpreter's Invoke answer carries the exact byte counts the code wrote in
# these response headers (it keeps only the first MiB of each stream); AgentCore sends none.
LOCAL_STDOUT_BYTES_HEADER = "x-sandbox-local-stdout-bytes"
LOCAL_STDERR_BYTES_HEADER = "x-sandbox-local-stderr-bytes"
LOCAL_AUDIT_SPOOL_FILE = "audit-spool.jsonl"
# The local session runtime (numpy, pandas, ...; docs/local-stack.md): a pinned venv the local stack
# passes as ENV_SESSION_PYTHON.
SESSION_VENV_DIR = ".venv-session"
