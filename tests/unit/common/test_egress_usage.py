"""The audit row's `egress` (sandbox_common.egress_usage): on every row, zeros without a proxy in the
path, and for an allowlist session the difference of its counters across the call."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from sandbox_common import naming as n
from sandbox_common.egress_usage import ZERO, Baseline, Counters, cap_refused, empty, mode_of, usage
from sandbox_common.errors import SandboxCapExceeded
from sandbox_common.models import ExecuteCodeRequest
from sandbox_common.outcome import Outcome

TOKEN = "ghp_" + "A1b2C3d4" * 5


def _item(allowed: int, denied: int, out: int, back: int, hosts: list[tuple[int, str]], cap: int = 0) -> dict:
    """A counters item as the proxy writes it (numbers as DynamoDB gives them back: Decimal)."""
    item: dict = {
        "allowed": Decimal(allowed),
        "denied": Decimal(denied),
        "bytes_out": Decimal(out),
        "bytes_in": Decimal(back),
        "denied_hosts": [{"host": h, "seq": Decimal(s)} for s, h in hosts],
    }
    if cap:
        item["cap_refused"] = {"dimension": "egress_daily_bytes", "count": Decimal(cap)}
    return item


@pytest.mark.parametrize(
    ("environment", "mode"),
    [
        ("default-public", "public"),
        ("internal-only", "none"),
        ("default-allowlist", "allowlist"),
        (None, "none"),
    ],
)
def test_mode_is_the_environments_egress(environment: str | None, mode: str) -> None:
    assert mode_of(environment) == mode
    assert empty(mode) == {
        "mode": mode,
        "allowed": 0,
        "denied": 0,
        "denied_hosts": [],
        "bytes_out": 0,
        "bytes_in": 0,
    }


def test_a_calls_figures_are_the_difference_and_its_own_denials_first_ten_redacted() -> None:
    # Given a session that had denials before the call, and 12 more during it (one token-shaped)
    before = Counters.from_item(_item(3, 2, 100, 1000, [(1, "old.example"), (2, "old2.example")]))
    during = [(2 + i, f"h{i}.example") for i in range(1, 13)]
    during[0] = (3, f"{TOKEN}.evil.example")
    after = Counters.from_item(_item(5, 14, 350, 5000, [(1, "old.example"), (2, "old2.example"), *during]))
    # When the call's usage is taken
    got = usage("default-allowlist", "s1", Baseline("s1", before), after)
    # Then the figures are the difference, and only this call's first 10 denials are named, redacted
    assert {k: got[k] for k in ("mode", "allowed", "denied", "bytes_out", "bytes_in")} == {
        "mode": "allowlist",
        "allowed": 2,
        "denied": 12,
        "bytes_out": 250,
        "bytes_in": 4000,
    }
    assert len(got["denied_hosts"]) == 10
    assert got["denied_hosts"][0] == "<redacted>.evil.example"
    assert got["denied_hosts"][1:] == [f"h{i}.example" for i in range(2, 11)]
    assert TOKEN not in str(got)


def test_a_baseline_of_another_session_counts_from_zero() -> None:
    # Given a baseline read for the turn's old session, and the call ran in a fresh one
    old = Baseline("old", Counters(allowed=9, bytes_out=900))
    after = Counters(allowed=1, bytes_out=10)
    # Then the fresh session's figures are its own, from zero
    assert usage("default-allowlist", "fresh", old, after)["allowed"] == 1
    assert usage("default-allowlist", "fresh", None, after)["bytes_out"] == 10


def test_cap_refused_is_the_calls_only_when_it_counted_up_during_it() -> None:
    before = Counters.from_item(_item(0, 0, 0, 0, [], cap=1))
    same = Counters.from_item(_item(0, 0, 0, 0, [], cap=1))
    more = Counters.from_item(_item(0, 0, 0, 0, [], cap=2))
    assert cap_refused("s", Baseline("s", before), same) is None
    assert cap_refused("s", Baseline("s", before), more) == "egress_daily_bytes"
    assert cap_refused("s", None, same) == "egress_daily_bytes"  # a new session's first refusal
    assert cap_refused("s", None, ZERO) is None


@pytest.mark.parametrize(
    "item",
    [None, {}, {"allowed": "x", "denied_hosts": "nope", "cap_refused": 3}, {"denied_hosts": [{"seq": 1}]}],
)
def test_an_unreadable_counters_item_counts_as_zero(item: dict | None) -> None:
    assert Counters.from_item(item) == ZERO


def test_a_baseline_survives_its_plain_json_form() -> None:
    baseline = Baseline(
        "s1", Counters(allowed=1, denied=2, bytes_out=3, bytes_in=4, cap_refused=("egress_daily_bytes", 1))
    )
    assert Baseline.from_dict(baseline.as_dict()) == baseline
    assert Baseline.from_dict(None) is None and Baseline.from_dict({"allowed": 1}) is None


def _outcome(environment: str | None) -> Outcome:
    request = ExecuteCodeRequest(
        action="execute_code",
        tenant_id="acme",
        agent_id="a",
        template_id="t",
        turn_id="tu",
        call_id="c",
        code="1",
    )
    outcome = Outcome(request=request, invocation_id="inv", started_at=datetime(2026, 11, 21, tzinfo=UTC))
    outcome.environment = environment
    return outcome


@pytest.mark.parametrize(
    ("environment", "mode"),
    [("default-public", "public"), ("default-allowlist", "allowlist"), (None, "none")],
)
def test_every_row_carries_egress(environment: str | None, mode: str) -> None:
    # Given a call refused before anything ran, in each environment (or none reached)
    outcome = _outcome(environment)
    outcome.fail(SandboxCapExceeded("x", dimension="tenant_daily", resets_at="2026-11-22T00:00:00Z"))
    # When its row is rendered / Then it says the environment's egress, zeros
    assert outcome.finish().audit_row(30)[n.AUDIT_ATTR_EGRESS] == empty(mode)


def test_an_egress_cap_refusal_after_the_code_ran_fails_the_answer_and_keeps_the_output() -> None:
    # Given code that ran fine, and then the egress cap's refusal
    from sandbox_runtime.runner import ExecutionResult

    outcome = _outcome("default-allowlist")
    result = ExecutionResult(
        exit_status="ok",
        exit_code=0,
        stdout="done\n",
        stderr="",
        stdout_bytes=5,
        stderr_bytes=0,
        stdout_truncated=False,
        stderr_truncated=False,
        duration_ms=10,
        error=None,
        error_message=None,
        failure_reason=None,
        full_stdout="done\n",
        full_stderr="",
        session_stopped=False,
    )
    outcome.ran(result, None)
    outcome.fail(
        SandboxCapExceeded(
            "cap (cap: egress_daily_bytes)", dimension="egress_daily_bytes", resets_at="2026-11-22T00:00:00Z"
        )
    )
    # When it is answered
    answer = outcome.finish().response()
    row = outcome.audit_row(30)
    # Then the answer is the refusal, with the code's output
    assert answer["ok"] is False and answer["error"] == "SandboxCapExceeded"
    assert answer["dimension"] == "egress_daily_bytes" and answer["resets_at"] == "2026-11-22T00:00:00Z"
    assert answer["exit_status"] == "cap_exceeded" and answer["stdout"] == "done\n"
    assert (row["exit_status"], row["error"]) == ("cap_exceeded", "SandboxCapExceeded")
