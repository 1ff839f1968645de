"""Bounded copies of untrusted text in dispatch are redacted before they are cut:
the internal-error metric's failure_reason property and the idempotency store's log causes."""

from __future__ import annotations

import pytest
from sandbox_common.outcome import internal_failure

from tests.support.emf import emf_records

TOKEN = "ghp_" + "Q7w9" * 9


@pytest.mark.parametrize("offset", [40, 60, 70, 76])
def test_internal_failure_metric_reason_redacted_before_the_80_char_cut(capsys, offset):
    # Given a reason whose token crosses the 80-character cut of the metric property
    reason = "turn_store_unavailable:" + "x" * (offset - 23) + " " + TOKEN
    # When the internal failure is counted
    internal_failure(reason)
    # Then the property holds no fragment of the token longer than its prefix + 4
    (record,) = [r for r in emf_records(capsys.readouterr().out) if "failure_reason" in r]
    assert len(record["failure_reason"]) <= 80
    assert TOKEN[:9] not in record["failure_reason"]
    assert record["failure_reason"].startswith("turn_store_unavailable:x")
