"""Session runner of the dispatch Lambda (SPEC §6, §6.5, §8 layer 2).

Use: build a `SessionRunner` per tenant (cheap: credentials and clients are cached per role);
`start_session(interpreter_id, name=turn_id)` returns a session id whose readiness preamble
passed, or raises a SandboxFailure; `execute(interpreter_id, session_id, code)` returns an
`ExecutionResult` (raises only CrossTenantInterpreter, before any AWS call, and
SessionGone, when AgentCore refused the invoke because the session no longer exists);
`stop_session(...)` never raises.
"""

from .credentials import TenantCredentials, clear_cache
from .errors import CrossTenantInterpreter, SessionGone, failure
from .session import ExecutionResult, SessionRunner

__all__ = [
    "CrossTenantInterpreter",
    "ExecutionResult",
    "SessionGone",
    "SessionRunner",
    "TenantCredentials",
    "clear_cache",
    "failure",
]
