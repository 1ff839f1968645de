"""Which tenants a call to dispatch may act for, from the function ARN it was invoked through.

Lambda does not tell a function who invoked it, but it does report the ARN the caller invoked,
qualifier included (the Python runtime's `context.invoked_function_arn`: "indicates if the invoker
specified a version number or alias"). So a tenant scope is carried by an alias: an agent
principal scoped to tenants is granted `lambda:InvokeFunction` only on the aliases
`scope_<tenant>` of dispatch (one per tenant of its scope; `_` never occurs in a tenant id, so the
name parses back unambiguously), and dispatch acts for that tenant alone when invoked through one.
The tenant in the event is checked against the scope, never the other way round.

Invoked unqualified, as `$LATEST`, through a version number or another alias: every tenant (the
principals granted those are the unscoped ones). A `scope_` alias that does not name a valid
tenant, or an ARN that is not a Lambda function ARN, allows no tenant. Stdlib only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .naming import TENANT_ID_RE

SCOPE_ALIAS_PREFIX = "scope_"
# arn:<partition>:lambda:<region>:<account>:function:<name>[:<qualifier>]
_FUNCTION_ARN_RE = re.compile(
    r"^arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:function:[A-Za-z0-9_-]{1,64}(?::(?P<qualifier>[A-Za-z0-9$_-]{1,128}))?$"
)


def alias_for(tenant_id: str) -> str:
    """The dispatch alias of a one-tenant scope."""
    if not TENANT_ID_RE.match(tenant_id):
        raise ValueError(f"{tenant_id!r} is not a tenant id")
    return f"{SCOPE_ALIAS_PREFIX}{tenant_id}"


@dataclass(frozen=True)
class Scope:
    """The tenants a call may act for: None = every tenant."""

    tenants: frozenset[str] | None
    qualifier: str | None = None

    def allows(self, tenant_id: str | None) -> bool:
        if self.tenants is None:
            return True
        return tenant_id is not None and tenant_id in self.tenants


EVERY_TENANT = Scope(None)


def scope_of(invoked_function_arn: str | None) -> Scope:
    """The scope of a call from the ARN Lambda says it was invoked through (None outside Lambda,
    where the caller is the process itself: every tenant)."""
    if invoked_function_arn is None:
        return EVERY_TENANT
    match = _FUNCTION_ARN_RE.match(invoked_function_arn)
    if match is None:
        return Scope(frozenset())  # not what Lambda reports: allow nothing
    qualifier = match["qualifier"]
    if qualifier is None or not qualifier.startswith(SCOPE_ALIAS_PREFIX):
        return Scope(None, qualifier)
    tenant = qualifier[len(SCOPE_ALIAS_PREFIX) :]
    return Scope(frozenset({tenant}) if TENANT_ID_RE.match(tenant) else frozenset(), qualifier)
