"""Per-call price and the per-tenant daily budget.

Pricing rule (docs/usage-mcp-strands.md, "Pricing"): a call is priced iff its code reached a session (it
ran, whatever its exit status), at the SSM price in force for that call
(`/thinkwork/{stage}/sandbox/cost_per_call_usd`); a call refused (pre-flight, caps) or failing
before its code reached a session costs 0. The price is the audit row's `estimated_cost_usd` and
the `SandboxEstimatedCostUSD` metric, so the two always agree.

Budget: the optional SSM parameter `/thinkwork/{stage}/sandbox/tenants/{tenant}/daily_budget_usd`
(a non-negative decimal). The tenant's estimated spend today is its daily counter (the quota
Lambda returns it with every admission, so no extra read) times the price: an upper bound, since
an admitted call that failed before running is counted but costs 0; the one call that takes it from below
the budget to at or above it emits `SandboxDailyBudgetCrossed` (alarmed) and a pure-JSON log
line. Never a refusal: the caps refuse, the budget only tells. An unreadable or invalid budget
parameter is treated as "no budget" (logged and counted): cost reporting never fails a call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from sandbox_common import naming as n
from sandbox_common.observability import emit_metric, logger
from sandbox_common.ttl_cache import TtlCache


def call_cost(ran_code: bool, price: float) -> float:
    """The audit row's estimated_cost_usd: the price when the code reached a session, else 0."""
    return price if ran_code else 0


def as_decimal(price: float) -> Decimal:
    """A float price as the decimal it was written as in SSM ("0.0015", not 0.00149999...)."""
    return Decimal(repr(price))


def crossed(count_today: int | None, price: Decimal, budget: Decimal | None) -> bool:
    """True for exactly the call that takes today's estimated spend (count × price) from below
    the budget to at or above it. Unknown count (the quota read-back failed) or no budget: False."""
    if budget is None or count_today is None or count_today < 1 or price <= 0:
        return False
    return count_today * price >= budget > (count_today - 1) * price


@dataclass
class PriceReader:
    """The stage's price per call from SSM, cached like the other per-container reads (≤ 60 s);
    0 when it cannot be read (cost is an estimate: a call never fails over it)."""

    stage: str
    ssm: Any
    ttl_seconds: float = 60.0

    def __post_init__(self) -> None:
        self.cache: TtlCache[float] = TtlCache(self.ttl_seconds)

    def __call__(self) -> float:
        return self.cache.get_or_load("price", self.load)

    def load(self) -> float:
        try:
            raw = self.ssm.get_parameter(Name=n.cost_per_call_parameter(self.stage))
            return max(0.0, float(raw["Parameter"]["Value"]))
        except Exception as exc:  # noqa: BLE001 — cost is an estimate: never fail a call over it
            logger.warning("cost_parameter_unreadable", extra={"cause": type(exc).__name__})
            return 0.0


@dataclass
class BudgetReader:
    """The tenant's daily budget from SSM, cached like the other per-container reads (≤ 60 s)."""

    stage: str
    ssm: Any
    ttl_seconds: float = 60.0

    def __post_init__(self) -> None:
        self._cache: TtlCache[Decimal | None] = TtlCache(self.ttl_seconds)

    def budget(self, tenant_id: str) -> Decimal | None:
        return self._cache.get_or_load(tenant_id, lambda: self._load(tenant_id))

    def _load(self, tenant_id: str) -> Decimal | None:
        name = n.tenant_daily_budget_parameter(self.stage, tenant_id)
        try:
            raw = self.ssm.get_parameter(Name=name)["Parameter"]["Value"]
        except Exception as exc:  # noqa: BLE001 — ParameterNotFound is "no budget"; anything else too
            if getattr(exc, "response", {}).get("Error", {}).get("Code") != "ParameterNotFound":
                logger.warning("daily_budget_unreadable", extra={"cause": type(exc).__name__})
            return None
        try:
            value = Decimal(raw.strip())
        except InvalidOperation:
            value = Decimal(-1)
        if not value.is_finite() or value < 0:
            logger.error("daily_budget_invalid", extra={"parameter": name})
            emit_metric(n.METRIC_BUDGET_PARAMETER_INVALID)
            return None
        return value


def report_if_crossed(
    tenant_id: str, count_today: int | None, price: Decimal, budget: Decimal | None
) -> bool:
    """Emit the metric (both dimension sets) and the log line when this call crossed the budget."""
    if not crossed(count_today, price, budget):
        return False
    for dimension_set in n.METRIC_DIMENSIONS[n.METRIC_DAILY_BUDGET_CROSSED]:
        emit_metric(n.METRIC_DAILY_BUDGET_CROSSED, dimensions={k: tenant_id for k in dimension_set})
    logger.warning(
        "daily_budget_crossed",
        extra={
            "tenant_id": tenant_id,
            "budget_usd": str(budget),
            "estimated_spend_usd": str((count_today or 0) * price),
            "calls_today": count_today,
        },
    )
    return True


@dataclass
class UsageAccounting:
    """Dispatch's two call sites: `admitted()` right after the quota admitted a call (budget
    check, on the count the quota Lambda returned: no extra read), `cost()` when the call's row is
    built (every row, refused ones at 0)."""

    price_per_call: Callable[[], float]
    budgets: BudgetReader | None = None

    def cost(self, ran_code: bool) -> float:
        return call_cost(ran_code, self.price_per_call()) if ran_code else 0

    def needs_count(self, tenant_id: str) -> bool:
        """Whether `admitted()` will use today's count: a budget is configured for the tenant and
        calls are priced. Otherwise the quota Lambda is spared its read-back."""
        if self.budgets is None or self.price_per_call() <= 0:
            return False
        return self.budgets.budget(tenant_id) is not None

    def admitted(self, tenant_id: str, count_today: int | None) -> bool:
        if self.budgets is None:
            return False
        price = self.price_per_call()
        if price <= 0:  # pricing off: no spend, no budget read
            return False
        return report_if_crossed(tenant_id, count_today, as_decimal(price), self.budgets.budget(tenant_id))
