"""Caps from SSM: TTL caching, negative caching, malformed values, unreadable SSM."""

from __future__ import annotations

import pytest
from sandbox_common import aws, dimensions, naming

TD = naming.TENANT_DAILY_COUNTERS


def _named(path: str):
    return lambda body: path.encode() in body


def test_caps_changed_value_applies_after_ttl_and_is_cached_before(quota, freeze, count_requests, cap_clock):
    # Given a 60 s cap cache and a tenant cap of 1, already reached
    freeze("2026-11-21T08:15:00Z")
    quota.configure(cache_ttl_seconds=60)
    quota.set_cap(dimensions.TENANT_DAILY.name, 1)
    assert quota.call()["ok"]
    ssm_reads = count_requests("ssm", "GetParameter")

    # When the operator raises the cap to 3
    quota.set_cap(dimensions.TENANT_DAILY.name, 3)
    within_ttl = quota.call()
    reads_within_ttl = ssm_reads.sent
    cap_clock.advance(59)
    still_within = quota.call()
    cap_clock.advance(2)
    after_ttl = quota.call()

    # Then the cached value (incl. the cached "no override" answers) is used without any SSM
    # read until the TTL passes, and the new cap applies after it
    assert within_ttl["dimension"] == "tenant_daily" and within_ttl["tenant_daily_cap"] == 1
    assert reads_within_ttl == 0
    assert still_within["dimension"] == "tenant_daily" and still_within["tenant_daily_cap"] == 1
    assert after_ttl == {"ok": True, "tenant_daily_count": 2, "agent_hourly_count": 2}
    assert ssm_reads.sent == 4  # two overrides (absent) + two globals, re-read once


def test_caps_missing_override_is_negative_cached(quota, count_requests):
    # Given no per-tenant override and a 60 s cache
    ssm_reads = count_requests("ssm", "GetParameter")
    assert quota.call()["ok"]
    first_reads = ssm_reads.sent

    # When the tenant calls again
    assert quota.call()["ok"]

    # Then the absent overrides were looked up once, and the second call made no SSM call
    assert first_reads == 4
    assert ssm_reads.sent == 4


@pytest.mark.parametrize("bad", ["-1", "1.5", " 10"])  # the full rule: tests/unit/quota
def test_caps_malformed_value_without_last_good_fails_closed(quota, freeze, log_lines, emf, bad):
    # Given a malformed global cap and a container that never saw a good one
    freeze("2026-11-21T08:15:00Z")
    quota.set_cap(dimensions.TENANT_DAILY.name, bad)

    # When a call arrives
    refused = quota.call()

    # Then it fails closed (retry in 60 s), with an error log and the invalid-parameter metric
    assert refused == {
        "ok": False,
        "dimension": "unknown",
        "resets_at": "2026-11-21T08:16:00Z",
        "tenant_daily_cap": None,
        "agent_hourly_cap": None,
    }
    lines = log_lines()
    assert len(emf(lines, naming.METRIC_CAP_PARAMETER_INVALID)) == 1
    assert any(
        line.get("level") == "ERROR" and line.get("parameter", "").endswith("/caps/tenant_daily")
        for line in lines
    )
    assert quota.items(TD) == []


def test_caps_malformed_value_uses_last_good_value(quota, freeze, log_lines, emf):
    # Given no cache (every call reads SSM) and a good cap of 2 already seen by this container
    freeze("2026-11-21T08:15:00Z")
    quota.configure(cache_ttl_seconds=0)
    quota.set_cap(dimensions.TENANT_DAILY.name, 2)
    assert quota.call()["ok"]

    # When the value becomes malformed
    quota.set_cap(dimensions.TENANT_DAILY.name, "two")
    second, third = quota.call(), quota.call()

    # Then the last good value (2) keeps governing, and the bad value is reported
    assert second["ok"] is True
    assert third["dimension"] == "tenant_daily" and third["tenant_daily_cap"] == 2
    assert len(emf(log_lines(), naming.METRIC_CAP_PARAMETER_INVALID)) >= 1


def test_caps_malformed_override_uses_its_last_good_value_not_global(quota, freeze):
    # Given an override of 1 seen once, with no cache
    freeze("2026-11-21T08:15:00Z")
    quota.configure(cache_ttl_seconds=0)
    quota.set_cap(dimensions.TENANT_DAILY.name, 1, tenant="acme")
    assert quota.call()["ok"]

    # When the override turns malformed
    quota.set_cap(dimensions.TENANT_DAILY.name, "lots", tenant="acme")
    refused = quota.call()

    # Then the override's last good value applies, not the global 1000
    assert refused["dimension"] == "tenant_daily" and refused["tenant_daily_cap"] == 1


def test_caps_missing_global_without_last_good_fails_closed(quota, freeze):
    # Given the global agent cap parameter does not exist
    freeze("2026-11-21T08:15:00Z")
    quota.delete_cap(dimensions.AGENT_HOURLY.name)

    # When a call arrives
    refused = quota.call()

    # Then it fails closed and nothing is counted
    assert (refused["dimension"], refused["resets_at"]) == ("unknown", "2026-11-21T08:16:00Z")
    assert quota.items(TD) == []


@pytest.mark.parametrize("code", ["AccessDeniedException", "ThrottlingException", "InternalServerError"])
def test_caps_unreadable_ssm_uses_last_good_value(quota, freeze, inject_error, instant_retries, code):
    # Given no cache and good caps already read by this container
    freeze("2026-11-21T08:15:00Z")
    quota.configure(cache_ttl_seconds=0)
    quota.set_cap(dimensions.TENANT_DAILY.name, 2)
    assert quota.call()["ok"]

    # When SSM starts failing for every read
    injected = inject_error("ssm", "GetParameter", code, status=500 if code == "InternalServerError" else 400)
    second, third = quota.call(), quota.call()

    # Then the last known values (cap 2, no override) keep governing; throttling was retried
    # (botocore's `max_attempts` counts retries: 1 + max_attempts sends per read), others were not
    attempts_per_read = 1 + aws.RETRY_CONFIG["max_attempts"] if code == "ThrottlingException" else 1
    assert injected.sent % attempts_per_read == 0 and injected.sent >= attempts_per_read
    assert second["ok"] is True
    assert third["dimension"] == "tenant_daily" and third["tenant_daily_cap"] == 2


def test_caps_unreadable_ssm_without_last_good_fails_closed(quota, freeze, inject_error):
    # Given a fresh container and SSM denying reads
    freeze("2026-11-21T08:15:00Z")
    inject_error("ssm", "GetParameter", "AccessDeniedException")

    # When a call arrives
    refused = quota.call()

    # Then it fails closed
    assert refused["dimension"] == "unknown" and refused["tenant_daily_cap"] is None
    assert quota.items(TD) == []


def test_caps_unreadable_override_fails_closed_even_with_good_global(quota, freeze, inject_error):
    # Given a fresh container; only the acme override path is unreadable (it might hold a 0)
    freeze("2026-11-21T08:15:00Z")
    override = dimensions.parameter("qtest", dimensions.TENANT_DAILY.name, "acme")
    inject_error("ssm", "GetParameter", "AccessDeniedException", when=_named(override))

    # When acme and globex call
    acme, globex = quota.call(tenant="acme"), quota.call(tenant="globex")

    # Then acme fails closed; globex, whose paths are readable, is admitted
    assert acme["dimension"] == "unknown"
    assert globex["ok"] is True


def test_caps_hourly_kill_switch_with_tenant_at_daily_cap_reports_tenant_daily(quota, freeze):
    # Given a tenant already at its daily cap, then the agent's hourly kill switch thrown
    freeze("2026-11-21T08:15:00Z")
    quota.set_cap(dimensions.TENANT_DAILY.name, 1)
    assert quota.call()["ok"] is True
    quota.set_cap(dimensions.AGENT_HOURLY.name, 0, tenant="acme")
    from quota_check.caps import clear_caches

    clear_caches()
    # When the next call arrives / Then both are at cap: tenant_daily, resetting at midnight
    refused = quota.call()
    assert refused["dimension"] == dimensions.TENANT_DAILY.name
    assert refused["resets_at"] == "2026-11-22T00:00:00Z"
    # And a fresh tenant under the same kill switch reports agent_hourly, creating no item
    quota.set_cap(dimensions.AGENT_HOURLY.name, 0, tenant="globex")
    clear_caches()
    fresh = quota.call(tenant="globex")
    assert fresh["dimension"] == dimensions.AGENT_HOURLY.name
    assert quota.count(naming.TENANT_DAILY_COUNTERS, "globex#2026-11-21") is None
