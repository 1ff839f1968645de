"""The bytes kind of the dimension registry: egress_daily_bytes, counted by the egress proxy."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sandbox_common import dimensions, messages
from sandbox_common import naming as n
from sandbox_common.cap_values import ByteCapValues, CallCapValues
from sandbox_common.windows import Windows


def test_egress_daily_bytes_is_a_per_tenant_daily_bytes_dimension_of_1_gib() -> None:
    dim = dimensions.get("egress_daily_bytes")
    assert dim is dimensions.EGRESS_DAILY_BYTES
    assert dim.kind is dimensions.Kind.BYTES and dim.per_tenant and dim.default == 1 << 30
    assert dimensions.byte_counts() == (dim,)
    assert dim not in dimensions.calls() and dim not in dimensions.sessions()


def test_bytes_counter_key_names_the_dimension_so_it_never_meets_a_calls_counter() -> None:
    windows = Windows.at(datetime(2026, 11, 21, 8, 30, tzinfo=UTC))
    values = {n.COUNTER_ATTR_TENANT: "acme"}
    assert dimensions.EGRESS_DAILY_BYTES.counter_key(values, windows) == "acme#egress_daily_bytes#2026-11-21"
    assert dimensions.EGRESS_DAILY_BYTES.table is dimensions.TENANT_DAILY.table
    assert dimensions.TENANT_DAILY.counter_key(values, windows) == "acme#2026-11-21"


def test_bytes_refusal_names_the_dimension_literally() -> None:
    text = messages.cap_exceeded("egress_daily_bytes", "2026-11-22T00:00:00Z")
    assert "(cap: egress_daily_bytes)" in text and "00:00 UTC" in text


def test_a_bytes_dimension_needs_a_window_and_table_and_no_marker() -> None:
    with pytest.raises(ValueError):
        dimensions.Dimension("x", dimensions.Kind.BYTES, default=1, wording="w")
    with pytest.raises(ValueError):
        dimensions.Dimension(
            "x",
            dimensions.Kind.BYTES,
            default=1,
            wording="w",
            window=dimensions.Window.DAY,
            table=n.TENANT_DAILY_COUNTERS,
            marker_attribute="m",
        )


class _Ssm:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values
        self.asked: list[list[str]] = []

    def get_parameters(self, Names: list[str]) -> dict[str, object]:  # noqa: N803 - boto3's name
        self.asked.append(Names)
        return {"Parameters": [{"Name": k, "Value": self.values[k]} for k in Names if k in self.values]}


def test_byte_cap_values_read_only_the_bytes_dimensions_with_the_tenant_override() -> None:
    dim = dimensions.EGRESS_DAILY_BYTES
    ssm = _Ssm({dim.parameter("s"): "1000", dim.parameter("s", "acme"): "50"})
    assert ByteCapValues(stage="s", ssm=ssm).values_for("acme") == {"egress_daily_bytes": 50}
    assert ByteCapValues(stage="s", ssm=ssm).values_for("globex") == {"egress_daily_bytes": 1000}
    assert all(dim.parameter("s") in names for names in ssm.asked)
    calls = CallCapValues(stage="s", ssm=_Ssm({d.parameter("s"): "5" for d in dimensions.calls()}))
    assert "egress_daily_bytes" not in calls.values_for("acme")
