"""The cap dimensions: one entry per dimension, from which everything that names a
dimension derives — the quota Lambda's counters and its contract (`quota_contract.QuotaAdmitted` /
`QuotaRefused`), the SSM parameters, the refusal the agent reads, the `SandboxCapExceeded`
metric, `sandboxctl caps` (choices, columns) and `counters`, the stage config's caps and the CDK
parameters made from them, and the pilot's checks.

Three kinds, told apart by the entry, never by the name:
- `Kind.CALLS`: every admitted call counts one in a window (a UTC day or hour), in one counter per
  value of the entry's `key` (request fields); sandbox-quota-check counts all of them in ONE
  transaction and refuses when any is at its cap (the first in `DIMENSIONS` order is the one
  named);
- `Kind.SESSIONS`: live sessions in the session ledger, one counter per tenant (`key`
  = tenant_id) or for the whole stage (`key` = ()); a new session is refused when it would
  exceed the cap;
- `Kind.BYTES`: bytes the egress proxy carried for a tenant in a window (a UTC day), counted by
  the proxy itself (functions/egress_proxy), not by the quota Lambda, in one counter item per
  tenant and window in the entry's counters table (its key names the dimension: `{tenant}#{name}#
  {day}`); at the cap the proxy refuses the tenant's new connections.

A dimension keyed by tenant_id may have a per-tenant override (`/…/caps/tenants/{t}/{name}`);
every dimension has its stage-wide value (`/…/caps/{name}`, written by CDK from the stage
config, whose default is the entry's). 0 is the kill switch; a value that cannot be read fails
closed (refused with the dimension `unknown`).

Adding a dimension is one entry here (its default included) and its tests: code that handles
dimensions reads `dimensions()` (or `calls()`, `sessions()`) when it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import ClassVar

from . import limits
from . import naming as n
from .windows import Windows

UNKNOWN = "unknown"  # what a refusal names when a cap could not be known (fail closed)


class Kind(StrEnum):
    CALLS = "calls"
    SESSIONS = "sessions"
    BYTES = "bytes"


class Window(StrEnum):
    DAY = "day"
    HOUR = "hour"


# How a refusal reads, per kind: `what` is the entry's wording, `name` its name (the
# dimension is named literally), `when` the reset time (HH:MM UTC) and `resets_at` its ISO form.
_REFUSALS: dict[Kind, str] = {
    Kind.CALLS: "{what}; please try again at {when} UTC ({resets_at}). (cap: {name})",
    Kind.BYTES: "{what}; please try again at {when} UTC ({resets_at}). (cap: {name})",
    Kind.SESSIONS: (
        "I can't start a code sandbox session: {what} ({name}); please try again at {when} UTC ({resets_at})."
    ),
}


@dataclass(frozen=True)
class Dimension:
    name: str  # the refusal's `dimension`, the metric's dimension value, the SSM leaf, the CLI's choice
    kind: Kind
    default: int  # the stage's cap when its config names none
    wording: str  # what the refusal says happened (see _REFUSALS)
    key: tuple[str, ...] = (n.COUNTER_ATTR_TENANT,)  # request fields that key one counter
    # calls and bytes: the window counted in and the counters table; calls also the "counted"
    # marker's attribute that holds this call's counter key (a release takes one off exactly that
    # counter)
    window: Window | None = None
    table: n.TableSpec | None = None
    marker_attribute: str | None = None

    def __post_init__(self) -> None:
        windowed = self.kind in (Kind.CALLS, Kind.BYTES)
        if (self.window is not None, self.table is not None) != (windowed, windowed):
            raise ValueError(f"{self.name}: a window and counters table iff it counts calls or bytes")
        if (self.marker_attribute is not None) != (self.kind is Kind.CALLS):
            raise ValueError(f"{self.name}: a marker attribute iff it counts calls")

    @property
    def per_tenant(self) -> bool:
        """A tenant may have its own value (`/…/caps/tenants/{t}/{name}`)."""
        return n.COUNTER_ATTR_TENANT in self.key

    def parameter(self, stage: str, tenant_id: str | None = None) -> str:
        """The stage-wide SSM path, or the tenant's override path. Only ever called with a
        tenant id that already matched REQUEST_ID_RE, so nothing hostile reaches an SSM path."""
        if tenant_id is None:
            return f"{n.ssm_prefix(stage)}/caps/{self.name}"
        if not self.per_tenant:
            raise ValueError(f"{self.name} is stage-wide: it has no per-tenant override")
        if not n.REQUEST_ID_RE.match(tenant_id):
            raise ValueError("tenant id not valid for an SSM path")
        return f"{n.ssm_prefix(stage)}/caps/tenants/{tenant_id}/{self.name}"

    # --- calls: the counter of one call ---------------------------------------------------------
    def window_label(self, windows: Windows) -> str:
        return windows.day if self.window is Window.DAY else windows.hour

    def resets_at(self, windows: Windows) -> datetime:
        return windows.day_resets_at if self.window is Window.DAY else windows.hour_resets_at

    def counter_key(self, values: Mapping[str, str], windows: Windows) -> str:
        """`{tenant}#{day}`, `{tenant}#{agent}#{hour}`, ...: the key's values, then the window. A
        bytes counter shares its table with call counters, so its key also names the dimension
        (`{tenant}#egress_daily_bytes#{day}`)."""
        named = [self.name] if self.kind is Kind.BYTES else []
        return "#".join([*(values[field] for field in self.key), *named, self.window_label(windows)])

    @property
    def count_field(self) -> str:
        """The quota contract's field with this dimension's count (admitted) ..."""
        return f"{self.name}_count"

    @property
    def cap_field(self) -> str:
        """... and with its cap (refused)."""
        return f"{self.name}_cap"

    def refusal(self, resets_at: str, when: str) -> str:
        return _REFUSALS[self.kind].format(what=self.wording, name=self.name, when=when, resets_at=resets_at)


TENANT_DAILY = Dimension(
    "tenant_daily",
    Kind.CALLS,
    default=1000,
    wording="I've hit the daily code-execution cap for this workspace",
    key=(n.COUNTER_ATTR_TENANT,),
    window=Window.DAY,
    table=n.TENANT_DAILY_COUNTERS,
    marker_attribute=n.QUOTA_MARKER_ATTR_DAILY_KEY,
)
AGENT_HOURLY = Dimension(
    "agent_hourly",
    Kind.CALLS,
    default=100,
    wording="I've hit this assistant's hourly code-execution cap",
    key=(n.COUNTER_ATTR_TENANT, n.COUNTER_ATTR_AGENT),
    window=Window.HOUR,
    table=n.AGENT_HOURLY_COUNTERS,
    marker_attribute=n.QUOTA_MARKER_ATTR_HOURLY_KEY,
)
TENANT_SESSIONS = Dimension(
    "tenant_sessions",
    Kind.SESSIONS,
    default=20,
    wording="this workspace already has as many live code sandbox sessions as it may",
    key=(n.COUNTER_ATTR_TENANT,),
)
GLOBAL_SESSIONS = Dimension(
    "global_sessions",
    Kind.SESSIONS,
    default=200,
    wording="the code sandbox has no free session capacity right now",
    key=(),
)

EGRESS_DAILY_BYTES = Dimension(
    "egress_daily_bytes",
    Kind.BYTES,
    default=1 << 30,  # 1 GiB a UTC day, out and in
    wording="this workspace has sent and received as much over the network today as it may",
    key=(n.COUNTER_ATTR_TENANT,),
    window=Window.DAY,
    table=n.TENANT_DAILY_COUNTERS,
)

# Every dimension, in refusal priority order (when several calls counters are at their caps at
# once, the first is the one named: tenant_daily before agent_hourly).
DIMENSIONS: tuple[Dimension, ...] = (
    TENANT_DAILY,
    AGENT_HOURLY,
    TENANT_SESSIONS,
    GLOBAL_SESSIONS,
    EGRESS_DAILY_BYTES,
)


def dimensions() -> tuple[Dimension, ...]:
    return DIMENSIONS


def calls() -> tuple[Dimension, ...]:
    return of_kind(Kind.CALLS)


def sessions() -> tuple[Dimension, ...]:
    return of_kind(Kind.SESSIONS)


def byte_counts() -> tuple[Dimension, ...]:
    return of_kind(Kind.BYTES)


def names() -> tuple[str, ...]:
    return tuple(d.name for d in DIMENSIONS)


def get(name: str) -> Dimension | None:
    return next((d for d in DIMENSIONS if d.name == name), None)


def of_kind(kind: Kind) -> tuple[Dimension, ...]:
    return tuple(d for d in DIMENSIONS if d.kind is kind)


class Caps:
    """The caps in force of one kind's dimensions (a tenant's), given in dimension order."""

    KIND: ClassVar[Kind]

    def __init__(self, *values: int) -> None:
        names = [d.name for d in of_kind(self.KIND)]
        if len(values) != len(names):
            raise ValueError(f"one cap per {self.KIND} dimension ({', '.join(names)})")
        self._caps = dict(zip(names, values, strict=True))

    def for_dimension(self, dimension: str) -> int:
        return self._caps[dimension]

    def as_dict(self) -> dict[str, int]:
        return dict(self._caps)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.as_dict() == self._caps  # type: ignore[attr-defined,unused-ignore]

    def __hash__(self) -> int:
        return hash(tuple(self._caps.items()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._caps})"


def parameter(stage: str, name: str, tenant_id: str | None = None) -> str:
    """The SSM path of dimension `name` (stage-wide, or the tenant's override)."""
    found = get(name)
    if found is None:
        raise ValueError(f"unknown cap dimension {name!r}")
    return found.parameter(stage, tenant_id)


def session_retry_at(now: datetime) -> datetime:
    """When a session-cap refusal asks the agent to retry."""
    return now + timedelta(seconds=limits.SESSION_CAP_RETRY_SECONDS)
