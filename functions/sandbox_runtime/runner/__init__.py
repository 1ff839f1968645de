"""The session runner: a tenant's sessions and the code that runs in them.

Build a `SessionRunner` per tenant (cheap: credentials and clients are cached per role);
`start_session(interpreter_id, name=...)` returns a session id whose readiness preamble passed, or
raises a SandboxFailure; `execute(interpreter_id, session_id, code)` returns an `ExecutionResult`
(raises only CrossTenantInterpreter, before any AWS call, and SessionGone, when AgentCore refused
the invoke because the session no longer exists); `stop_session(...)` never raises. What the rest
of the run time needs of a runner is public on the small objects it owns (`execution`): its
`invoker`, its `output` and its `files`.
"""

from .credentials import TenantCredentials, clear_cache
from .errors import CrossTenantInterpreter, SessionGone, failure
from .execution import ExecutionResult, Invocation, Invoker, Output
from .session import SessionRunner

__all__ = [
    "CrossTenantInterpreter",
    "ExecutionResult",
    "Invocation",
    "Invoker",
    "Output",
    "SessionGone",
    "SessionRunner",
    "TenantCredentials",
    "clear_cache",
    "failure",
]
