"""No flip back inside the cache window: once one quota container refused a tenant's call because
of a cap change it has seen, a container whose cached caps are older does not admit the next call
of that tenant on them (it reads the caps again first). Two containers = two cap readers, each
with its own cache, over the one moto server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sandbox_common import aws, dimensions, naming

from .conftest import STAGE, QuotaStack

TD = naming.TENANT_DAILY_COUNTERS


@pytest.fixture
def containers(quota: QuotaStack, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """use(name): the quota Lambda's next invocations run in container `name` (its own caps cache)."""
    from aws_lambda_powertools.utilities.parameters import SSMProvider
    from quota_check import caps

    readers: dict[str, Any] = {}
    current: list[Any] = []

    def use(name: str) -> None:
        if name not in readers:
            readers[name] = caps.CapReader(
                stage=STAGE, ttl_seconds=60, provider=SSMProvider(boto3_client=aws.client("ssm"))
            )
        current[:] = [readers[name]]

    def reader() -> Any:
        return current[0]

    reader.cache_clear = lambda: None  # type: ignore[attr-defined]  # caps.clear_caches() calls it
    monkeypatch.setattr(caps, "cap_reader", reader)
    return use


def _daily(quota: QuotaStack) -> int:
    return sum(
        int(i[naming.COUNTER_ATTR_COUNT]["N"])
        for i in quota.items(TD)
        if i[TD.pk]["S"].startswith("acme#") and naming.COUNTER_ATTR_COUNT in i
    )


@pytest.mark.parametrize("new_cap", [0, 1], ids=["kill_switch", "lowered"])
def test_breaker_a_cap_change_seen_as_a_refusal_is_not_undone_by_a_container_with_older_caps(
    quota: QuotaStack, containers: Callable[[str], None], new_cap: int
) -> None:
    # Given container B that read acme's caps (1000 a day) and admitted two calls
    containers("B")
    assert quota.call()["ok"] is True
    assert quota.call()["ok"] is True
    # When the operator lowers acme's daily cap (to 0, or below today's count) and a fresh
    # container A refuses acme's next call on it
    quota.set_cap(dimensions.TENANT_DAILY.name, new_cap, tenant="acme")
    containers("A")
    refused = quota.call()
    assert (refused["ok"], refused["dimension"]) == (False, "tenant_daily"), refused
    assert set(quota.breakers()) == {"acme"}  # A's refusal raised acme's breaker version
    # Then container B, whose cached cap still says 1000, refuses the next calls too, and counts nothing
    containers("B")
    for _ in range(2):
        again = quota.call()
        assert (again["ok"], again["dimension"], again["tenant_daily_cap"]) == (
            False,
            "tenant_daily",
            new_cap,
        )
    assert _daily(quota) == 2


def test_breaker_a_raised_cap_admits_again_in_every_container(
    quota: QuotaStack, containers: Callable[[str], None]
) -> None:
    # Given acme refused at a cap of 0 by container A after container B had cached 1000
    containers("B")
    assert quota.call()["ok"] is True
    quota.set_cap(dimensions.TENANT_DAILY.name, 0, tenant="acme")
    containers("A")
    assert quota.call()["ok"] is False
    # When the operator raises it again and both containers see it (A's cache is still 0: a fresh C)
    quota.set_cap(dimensions.TENANT_DAILY.name, 5, tenant="acme")
    containers("C")
    admitted_c = quota.call()
    containers("B")
    admitted_b = quota.call()
    # Then calls are admitted (B read the caps again instead of refusing for ever)
    assert admitted_c["ok"] is True and admitted_b["ok"] is True
