"""Environment variables: set by CDK (or the local stack), read through sandbox_common.settings."""

from __future__ import annotations

ENV_STAGE = "SANDBOX_STAGE"
ENV_TENANT_DAILY_TABLE = "TENANT_DAILY_COUNTERS_TABLE"
ENV_AGENT_HOURLY_TABLE = "AGENT_HOURLY_COUNTERS_TABLE"
ENV_INVOCATIONS_TABLE = "INVOCATIONS_TABLE"
ENV_TURNS_TABLE = "TURNS_TABLE"
ENV_TENANTS_TABLE = "TENANTS_TABLE"
ENV_IDEMPOTENCY_TABLE = "IDEMPOTENCY_TABLE"
ENV_FINDINGS_TABLE = "FINDINGS_TABLE"
ENV_JOBS_TABLE = "JOBS_TABLE"
ENV_SESSIONS_TABLE = "SESSIONS_TABLE"
ENV_CONTINUATIONS_TABLE = "CONTINUATIONS_TABLE"
ENV_ARTIFACTS_BUCKET = "ARTIFACTS_BUCKET"
ENV_QUOTA_FUNCTION = "QUOTA_FUNCTION_NAME"
ENV_DISPATCH_FUNCTION = "DISPATCH_FUNCTION_NAME"
ENV_REAPER_FUNCTION = "REAPER_FUNCTION_NAME"
ENV_AUDIT_DLQ_URL = "AUDIT_DLQ_URL"
ENV_CALL_TIMEOUT = "CALL_TIMEOUT_SECONDS"
ENV_SESSION_TIMEOUT = "SESSION_TIMEOUT_SECONDS"
ENV_AUDIT_RETENTION_DAYS = "AUDIT_RETENTION_DAYS"
ENV_STDOUT_CAP = "STDOUT_CAP_BYTES"
ENV_STDERR_CAP = "STDERR_CAP_BYTES"
ENV_CACHE_TTL = "CONFIG_CACHE_TTL_SECONDS"
ENV_REQUIRE_TURN_TOKEN = "REQUIRE_TURN_TOKEN"
ENV_TOOL_WAIT_SECONDS = "TOOL_WAIT_SECONDS"  # the stage's tool wait bound (docs/tool-calling.md)
ENV_EGRESS_TABLE = "EGRESS_TABLE"
# How a session of an `allowlist` environment reaches the egress proxy (a URL without credentials;
# the session's own credential is added at its start), where the proxy's CA bundle is inside the
# session, and the stage's package index as the session's pip sees it.
ENV_EGRESS_PROXY_URL = "SANDBOX_EGRESS_PROXY_URL"
ENV_EGRESS_CA_BUNDLE = "SANDBOX_EGRESS_CA_BUNDLE"
ENV_EGRESS_INDEX_URL = "SANDBOX_EGRESS_INDEX_URL"
# Local stack only, read by `sandboxctl local up` for the local egress proxy: `name=127.0.0.1:PORT,...`
# sends an allowed name to a loopback server, whose TLS is verified against the PEM file
# SANDBOX_EGRESS_TEST_CA. Without a route, loopback and private addresses are refused.
ENV_EGRESS_TEST_ROUTES = "SANDBOX_EGRESS_TEST_ROUTES"
ENV_EGRESS_TEST_CA = "SANDBOX_EGRESS_TEST_CA"
# Local stack only (tests): `name=ADDRESS,...` fixed answers the local proxy uses instead of DNS,
# checked like DNS answers (a name answered with a private or link-local address is refused).
ENV_EGRESS_TEST_RESOLVE = "SANDBOX_EGRESS_TEST_RESOLVE"
# Local stack only: the file the audit writer appends a row to when both the table and the
# dead-letter queue are unreachable (they live in the same emulated AWS); `audit replay` drains it.
ENV_AUDIT_SPOOL = "SANDBOX_AUDIT_SPOOL"
# Read by the local interpreter (infra/local/interpreter), passed through by the local stack.
# "1": sessions may run without isolation when bubblewrap cannot isolate them (warned on every start).
ENV_LOCAL_UNISOLATED = "SANDBOX_LOCAL_UNISOLATED"
# The Python that runs session code (a venv's python or a base interpreter); default: the local
# interpreter's own base interpreter. Bound read-only into the sandbox with its base installation.
ENV_SESSION_PYTHON = "SANDBOX_SESSION_PYTHON"
# In a session's environment: the Node.js and the `typescript` package its JavaScript and TypeScript
# programs run with (read by sandbox_session.node; the local interpreter sets them).
ENV_SESSION_NODE = "SANDBOX_NODE"
ENV_SESSION_TYPESCRIPT = "SANDBOX_TYPESCRIPT"
