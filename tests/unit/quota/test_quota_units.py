"""Pure parts of sandbox-quota-check: cap parsing, cancellation classification, expressions."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from quota_check import counters
from quota_check.caps import Caps, parse_cap
from quota_check.logic import Admitted, Refused
from sandbox_common import limits, naming
from sandbox_common.settings import QuotaSettings
from sandbox_common.windows import Windows


@given(st.integers(min_value=0, max_value=10**38 - 1))
def test_parse_cap_accepts_every_non_negative_integer(value):
    # Given / When / Then: the decimal form of any storable non-negative integer is a cap
    assert parse_cap(str(value)) == value


@given(st.text())
def test_parse_cap_rejects_anything_but_ascii_digits(raw):
    # Given any string / When parsed / Then only 1..38 ASCII digits are a cap
    expected = int(raw) if re.fullmatch(r"[0-9]{1,38}", raw) else None
    assert parse_cap(raw) == expected


@pytest.mark.parametrize(
    "raw", ["-1", "abc", "1.5", " 10", "10 ", "10\n", "+5", "1e3", "٣", "0x10", "", "1_000", None, b"5", 5]
)
def test_parse_cap_rejects_malformed_values(raw):
    # Given a value that is not a non-negative integer string / When parsed / Then no cap
    assert parse_cap(raw) is None


@pytest.fixture
def keys(monkeypatch):
    for key, value in (
        QuotaSettings(stage="u", tenant_daily_table="td", agent_hourly_table="ah").to_env().items()
    ):
        monkeypatch.setenv(key, value)
    return counters.CounterKeys.for_call(
        "acme", "agent-7", Windows.at(datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC))
    )


def test_counter_keys_windows_and_expiry(keys):
    # Given the last second of 2026 / Then keys name the windows and TTLs follow the window ends
    grace = limits.COUNTER_EXPIRY_GRACE_SECONDS
    assert (keys["tenant_daily"].table, keys["tenant_daily"].key) == ("td", "acme#2026-12-31")
    assert (keys["agent_hourly"].table, keys["agent_hourly"].key) == ("ah", "acme#agent-7#2026-12-31T23")
    assert keys["tenant_daily"].expires_at == int(datetime(2027, 1, 1, tzinfo=UTC).timestamp()) + grace
    assert keys["agent_hourly"].expires_at == keys["tenant_daily"].expires_at
    assert [item.dimension for item in keys.in_order()] == ["tenant_daily", "agent_hourly"]


@pytest.mark.parametrize(
    ("reasons", "dimension", "counts"),
    [
        (
            [{"Code": "ConditionalCheckFailed", "Item": {"call_count": {"N": "5"}}}, {"Code": "None"}],
            "tenant_daily",
            {"tenant_daily": 5, "agent_hourly": None},
        ),
        (
            [{"Code": None}, {"Code": "ConditionalCheckFailed", "Item": {"call_count": {"N": "9"}}}],
            "agent_hourly",
            {"tenant_daily": None, "agent_hourly": 9},
        ),
        (
            [{"Code": "ConditionalCheckFailed"}, {"Code": "ConditionalCheckFailed"}],
            "tenant_daily",
            {"tenant_daily": None, "agent_hourly": None},
        ),
    ],
    ids=["tenant", "agent-null-code", "both-no-items"],
)
def test_classify_cancellation_condition_failures_name_the_window(keys, reasons, dimension, counts):
    # Given cancellation reasons ordered like the transaction / When classified
    outcome = counters._classify_cancellation(keys.in_order(), reasons)

    # Then the first failed window in priority order is the refused dimension
    assert isinstance(outcome, counters.CapReached)
    assert (outcome.dimension, outcome.counts) == (dimension, counts)


@pytest.mark.parametrize(
    ("reasons", "code"),
    [
        ([{"Code": "None"}, {"Code": "TransactionConflict"}], "TransactionConflict"),
        ([{"Code": "ConditionalCheckFailed"}, {"Code": "ThrottlingError"}], "ThrottlingError"),
        ([{"Code": "ValidationError"}, {"Code": "None"}], "ValidationError"),
        ([{"Code": "None"}, {"Code": "None"}], "TransactionCanceled"),
        ([{"Code": "ConditionalCheckFailed"}], "TransactionCanceledWithoutReasons"),
        ([], "TransactionCanceledWithoutReasons"),
    ],
)
def test_classify_cancellation_anything_else_is_a_store_error(keys, reasons, code):
    # Given a cancellation that is not (only) a cap / When classified / Then fail-closed material
    outcome = counters._classify_cancellation(keys.in_order(), reasons)
    assert isinstance(outcome, counters.CounterStoreError) and outcome.code == code


_ids = st.from_regex(naming.REQUEST_ID_RE, fullmatch=True)


@given(tenant=_ids, agent=_ids)
def test_update_expressions_never_carry_request_values(monkeypatch_session_env, tenant, agent):
    # Given any valid ids / When the transaction items are built
    keys = counters.CounterKeys.for_call(tenant, agent, Windows.at(datetime(2026, 11, 21, 8, tzinfo=UTC)))
    updates = [counters._update(item, 3)["Update"] for item in keys.in_order()]
    assert len(updates) == 2  # both counters: the loop below checks each

    # Then the expressions are the same as for any other ids: ids travel only as attribute values
    reference = counters.CounterKeys.for_call(
        "acme", "agent-7", Windows.at(datetime(2026, 11, 21, 8, tzinfo=UTC))
    )
    for update, ref in zip(
        updates, [counters._update(item, 3)["Update"] for item in reference.in_order()], strict=True
    ):
        assert update["ConditionExpression"] == "attribute_not_exists(#c) OR #c < :cap"
        assert update["UpdateExpression"] == ref["UpdateExpression"]
        assert update["UpdateExpression"].startswith("SET #c = if_not_exists(#c, :zero) + :one, #e = :exp")
        assert update["ExpressionAttributeNames"] == ref["ExpressionAttributeNames"]
        assert update["ReturnValuesOnConditionCheckFailure"] == "ALL_OLD"
        assert update["ExpressionAttributeValues"][":cap"] == {"N": "3"}


@pytest.fixture(scope="module")
def monkeypatch_session_env():
    # hypothesis re-runs the test body many times; a module-scoped env avoids function fixtures
    with pytest.MonkeyPatch.context() as mp:
        for key, value in (
            QuotaSettings(stage="u", tenant_daily_table="td", agent_hourly_table="ah").to_env().items()
        ):
            mp.setenv(key, value)
        yield


def test_responses_match_the_contract_shapes():
    # Given decisions / When rendered / Then the quota contract's shapes, resets_at in ISO-8601 Z
    refused = Refused("agent_hourly", datetime(2026, 11, 21, 9, tzinfo=UTC), 1000, None)
    assert refused.to_response() == {
        "ok": False,
        "dimension": "agent_hourly",
        "resets_at": "2026-11-21T09:00:00Z",
        "tenant_daily_cap": 1000,
        "agent_hourly_cap": None,
    }
    assert Admitted(3, 1).to_response() == {"ok": True, "tenant_daily_count": 3, "agent_hourly_count": 1}
    assert Caps(5, 0).for_dimension("agent_hourly") == 0 and Caps(5, 0).as_dict() == {
        "tenant_daily": 5,
        "agent_hourly": 0,
    }
