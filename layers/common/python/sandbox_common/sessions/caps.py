"""Session capacity caps from SSM, one per sessions dimension
(`sandbox_common.dimensions.sessions()`), with the call caps' rules, read by
`sandbox_common.cap_values.CapValues`: a per-tenant override `/…/caps/tenants/{t}/{dim}` wins over
`/…/caps/{dim}` for a dimension keyed by tenant; a stage-wide one has only `/…/caps/{dim}`. 0 is
the kill switch. Cached ≤ TTL per tenant; ONE GetParameters call reads every path.

Fail closed: an unreadable store or a missing/malformed global with no last good value raises
`SessionCapsUnavailable`. A malformed value falls back to its path's last good value.
"""

from __future__ import annotations

from .. import dimensions
from ..cap_values import CapsUnavailable, CapValues, parse_cap
from .ledger import SessionCaps

__all__ = ["SessionCapReader", "SessionCapsUnavailable", "parse_cap"]


class SessionCapsUnavailable(CapsUnavailable):
    pass


class SessionCapReader(CapValues):
    KIND = dimensions.Kind.SESSIONS
    UNAVAILABLE = SessionCapsUnavailable

    def caps_for(self, tenant_id: str) -> SessionCaps:
        values = self.values_for(tenant_id)
        return SessionCaps(*(values[d.name] for d in dimensions.sessions()))
