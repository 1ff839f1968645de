"""sandbox-quota-check end to end on the moto server: caps, windows, kill switch, refusals."""

from __future__ import annotations

import pytest
from sandbox_common import dimensions, limits, naming
from sandbox_common.windows import Windows

TD = naming.TENANT_DAILY_COUNTERS
AH = naming.AGENT_HOURLY_COUNTERS


def test_handler_admits_and_reports_counts(quota, freeze):
    # Given default caps and a frozen clock
    now = freeze("2026-11-21T08:15:00Z")
    w = Windows.at(now)

    # When two calls arrive
    first = quota.call()
    second = quota.call()

    # Then both are admitted with counts read back after each increment
    assert first == {"ok": True, "tenant_daily_count": 1, "agent_hourly_count": 1}
    assert second == {"ok": True, "tenant_daily_count": 2, "agent_hourly_count": 2}
    assert quota.count(TD, dimensions.TENANT_DAILY.counter_key({"tenant_id": "acme"}, w)) == 2
    assert (
        quota.count(AH, dimensions.AGENT_HOURLY.counter_key({"tenant_id": "acme", "agent_id": "agent-7"}, w))
        == 2
    )


def test_handler_without_counts_admits_counts_and_skips_the_read_back(quota, freeze, count_requests):
    # Given default caps, a frozen clock and one call already admitted
    now = freeze("2026-11-21T08:15:00Z")
    w = Windows.at(now)
    assert quota.call()["ok"]
    read_backs = count_requests("dynamodb", "BatchGetItem")

    # When a caller that needs no counts (dispatch without a daily budget) asks
    answer = quota.invoke({"tenant_id": "acme", "agent_id": "agent-7", "counts": False})

    # Then it is admitted and counted like any call, with both counts null and no read-back sent
    assert answer == {"ok": True, "tenant_daily_count": None, "agent_hourly_count": None}
    assert quota.count(TD, dimensions.TENANT_DAILY.counter_key({"tenant_id": "acme"}, w)) == 2
    assert (
        quota.count(AH, dimensions.AGENT_HOURLY.counter_key({"tenant_id": "acme", "agent_id": "agent-7"}, w))
        == 2
    )
    assert read_backs.sent == 0


def test_handler_counter_items_carry_ttl_window_and_owner(quota, freeze):
    # Given a frozen clock
    now = freeze("2026-11-21T08:15:00Z")

    # When one call is admitted
    quota.call()

    # Then each item expires one grace period after its window ends, and says whose it is
    (daily,) = quota.items(TD)
    (hourly,) = quota.items(AH)
    grace = limits.COUNTER_EXPIRY_GRACE_SECONDS
    assert int(daily["expires_at"]["N"]) == int(Windows.at(now).day_resets_at.timestamp()) + grace
    assert int(hourly["expires_at"]["N"]) == int(Windows.at(now).hour_resets_at.timestamp()) + grace
    assert daily[naming.COUNTER_ATTR_WINDOW] == {"S": "2026-11-21"}
    assert hourly[naming.COUNTER_ATTR_WINDOW] == {"S": "2026-11-21T08"}
    assert daily[naming.COUNTER_ATTR_TENANT] == {"S": "acme"}
    assert hourly[naming.COUNTER_ATTR_AGENT] == {"S": "agent-7"}


def test_handler_third_call_over_tenant_cap_refused_until_midnight(quota, freeze):
    # Given a tenant cap of 2 per day
    freeze("2026-11-21T08:15:00Z")
    quota.set_cap(dimensions.TENANT_DAILY.name, 2)

    # When three calls arrive (from two agents, so only the tenant window is shared)
    first, second = quota.call(agent="a1"), quota.call(agent="a2")
    third = quota.call(agent="a3")

    # Then calls 1..2 pass and the third is refused until the next UTC midnight, counting nothing
    assert first["ok"] and second["ok"]
    assert third == {
        "ok": False,
        "dimension": "tenant_daily",
        "resets_at": "2026-11-22T00:00:00Z",
        "tenant_daily_cap": 2,
        "agent_hourly_cap": 100,
    }
    assert quota.count(TD, "acme#2026-11-21") == 2
    assert quota.count(AH, "acme#a3#2026-11-21T08") is None


def test_handler_agent_at_hourly_cap_refused_and_tenant_count_unchanged(quota, freeze):
    # Given an agent cap of 1 per hour
    freeze("2026-11-21T08:15:00Z")
    quota.set_cap(dimensions.AGENT_HOURLY.name, 1)
    assert quota.call()["ok"]

    # When the same agent calls again
    refused = quota.call()

    # Then it is refused on agent_hourly until the next full hour; the tenant count did not move
    assert refused["dimension"] == "agent_hourly"
    assert refused["resets_at"] == "2026-11-21T09:00:00Z"
    assert quota.count(TD, "acme#2026-11-21") == 1
    assert quota.count(AH, "acme#agent-7#2026-11-21T08") == 1
    # and another agent of the tenant is still admitted
    assert quota.call(agent="agent-8") == {"ok": True, "tenant_daily_count": 2, "agent_hourly_count": 1}


def test_handler_both_at_cap_reports_tenant_daily(quota, freeze):
    # Given both caps at 1 and one admitted call
    freeze("2026-11-21T08:15:00Z")
    quota.set_cap(dimensions.TENANT_DAILY.name, 1)
    quota.set_cap(dimensions.AGENT_HOURLY.name, 1)
    assert quota.call()["ok"]

    # When the same agent calls again (both windows full)
    refused = quota.call()

    # Then the tenant dimension is reported
    assert refused["dimension"] == "tenant_daily"
    assert refused["resets_at"] == "2026-11-22T00:00:00Z"


@pytest.mark.parametrize(
    ("tenant_cap", "agent_cap", "dimension", "resets_at"),
    [
        (0, 100, "tenant_daily", "2026-11-22T00:00:00Z"),
        (1000, 0, "agent_hourly", "2026-11-21T09:00:00Z"),
        (0, 0, "tenant_daily", "2026-11-22T00:00:00Z"),
    ],
)
def test_handler_cap_zero_refuses_fresh_window_without_touching_dynamodb(
    quota, freeze, count_requests, tenant_cap, agent_cap, dimension, resets_at
):
    # Given the kill switch (cap 0) and windows that have never been used
    freeze("2026-11-21T08:15:00Z")
    quota.set_cap(dimensions.TENANT_DAILY.name, tenant_cap)
    quota.set_cap(dimensions.AGENT_HOURLY.name, agent_cap)
    transactions = count_requests("dynamodb", "TransactWriteItems")

    # When the very first call of the window arrives
    refused = quota.call()

    # Then it is refused, no transaction was sent and no counter item exists in either table
    assert refused["ok"] is False
    assert refused["dimension"] == dimension
    assert refused["resets_at"] == resets_at
    assert transactions.sent == 0
    assert quota.items(TD) == [] and quota.items(AH) == []


def test_handler_cap_lowered_to_zero_mid_window_refuses(quota, freeze):
    # Given a window with admitted calls
    freeze("2026-11-21T08:15:00Z")
    assert quota.call()["ok"]
    quota.configure(cache_ttl_seconds=0)  # no cache: the change is visible at once

    # When the operator flips the tenant cap to 0
    quota.set_cap(dimensions.TENANT_DAILY.name, 0, tenant="acme")
    refused = quota.call()

    # Then the next call is refused and the count stays where it was
    assert refused["dimension"] == "tenant_daily"
    assert refused["tenant_daily_cap"] == 0
    assert quota.count(TD, "acme#2026-11-21") == 1


@pytest.mark.parametrize(
    ("last_second", "next_window", "tenant_cap", "dimension", "resets_at"),
    [
        ("2026-11-21T08:59:59Z", "2026-11-21T09:00:00Z", 1000, "agent_hourly", "2026-11-21T09:00:00Z"),
        ("2026-11-21T23:59:59Z", "2026-11-22T00:00:00Z", 1, "tenant_daily", "2026-11-22T00:00:00Z"),
        ("2026-04-30T23:59:59Z", "2026-05-01T00:00:00Z", 1, "tenant_daily", "2026-05-01T00:00:00Z"),
        ("2026-12-31T23:59:59Z", "2027-01-01T00:00:00Z", 1, "tenant_daily", "2027-01-01T00:00:00Z"),
        ("2028-02-28T23:59:59Z", "2028-02-29T00:00:00Z", 1, "tenant_daily", "2028-02-29T00:00:00Z"),
        ("2028-02-29T23:59:59Z", "2028-03-01T00:00:00Z", 1, "tenant_daily", "2028-03-01T00:00:00Z"),
        ("2027-02-28T23:59:59Z", "2027-03-01T00:00:00Z", 1, "tenant_daily", "2027-03-01T00:00:00Z"),
    ],
)
def test_handler_utc_rollover_opens_new_window(
    quota, freeze, last_second, next_window, tenant_cap, dimension, resets_at
):
    # Given a full window in its last second
    quota.set_cap(dimensions.TENANT_DAILY.name, tenant_cap)
    quota.set_cap(dimensions.AGENT_HOURLY.name, 1)
    freeze(last_second)
    assert quota.call()["ok"]

    # When the window is full, then the clock crosses the boundary
    refused = quota.call()
    freeze(next_window)
    admitted = quota.call()

    # Then the refusal names the boundary, and the first call after it starts a new window at 1
    assert (refused["dimension"], refused["resets_at"]) == (dimension, resets_at)
    assert admitted["ok"] is True
    assert admitted["agent_hourly_count"] == 1
    if dimension == "tenant_daily":
        assert admitted["tenant_daily_count"] == 1
        assert quota.count(TD, f"acme#{next_window[:10]}") == 1


def test_handler_per_tenant_override_wins_over_global(quota, freeze):
    # Given a global tenant cap of 1000, acme overridden down to 1 and globex's agents overridden up
    freeze("2026-11-21T08:15:00Z")
    quota.set_cap(dimensions.AGENT_HOURLY.name, 1)
    quota.set_cap(dimensions.TENANT_DAILY.name, 1, tenant="acme")
    quota.set_cap(dimensions.AGENT_HOURLY.name, 3, tenant="globex")

    # When each tenant calls repeatedly from one agent
    acme = [quota.call(tenant="acme") for _ in range(2)]
    globex = [quota.call(tenant="globex") for _ in range(4)]

    # Then each tenant's override applies; the other dimension keeps the global value
    assert [r["ok"] for r in acme] == [True, False]
    assert (acme[1]["dimension"], acme[1]["tenant_daily_cap"], acme[1]["agent_hourly_cap"]) == (
        "tenant_daily",
        1,
        1,
    )
    assert [r["ok"] for r in globex] == [True, True, True, False]
    assert (globex[3]["dimension"], globex[3]["tenant_daily_cap"], globex[3]["agent_hourly_cap"]) == (
        "agent_hourly",
        1000,
        3,
    )
