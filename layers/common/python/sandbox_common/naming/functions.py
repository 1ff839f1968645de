"""Lambda functions: logical names, their packages under functions/, function names, handlers,
log groups and roles."""

from __future__ import annotations

from .ids import PROJECT

DISPATCH = "dispatch"
QUOTA_CHECK = "sandbox-quota-check"
BACKSTOP = "backstop"
REAPER = "sandbox-reaper"  # the session reaper, scheduled (docs/sessions.md)
FUNCTIONS: tuple[str, ...] = (DISPATCH, QUOTA_CHECK, BACKSTOP, REAPER)
# logical function name -> package under functions/ (handler is "<package>.handler.handler")
FUNCTION_PACKAGES: dict[str, str] = {
    DISPATCH: "dispatch",
    QUOTA_CHECK: "quota_check",
    BACKSTOP: "backstop",
    REAPER: "reaper",
}
# What dispatch and the reaper both run, shipped beside each one's own package (functions/).
SHARED_RUNTIME_PACKAGE = "sandbox_runtime"


def function_name(stage: str, logical: str) -> str:
    return f"{PROJECT}-{stage}-{logical}"


def handler_string(logical: str) -> str:
    return f"{FUNCTION_PACKAGES[logical]}.handler.handler"


def log_group_name(stage: str, logical: str) -> str:
    return f"/aws/lambda/{function_name(stage, logical)}"


def function_role_name(stage: str, logical: str) -> str:
    """Fixed role name per function, so a tenant shard can trust the dispatch role by ARN
    without a cross-stack export (adding a tenant then touches only its shard)."""
    return f"{PROJECT}-{stage}-{logical}-role"
