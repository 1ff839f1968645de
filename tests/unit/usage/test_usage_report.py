"""`sandboxctl usage`'s report (infra/sandboxctl/usage.py) against real DynamoDB semantics (moto
server): one Query on `by_tenant_time`, every page, totals equal to a hand count of the rows."""

from __future__ import annotations

import io
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import boto3
import pytest
from sandbox_common import naming as n

from infra.sandboxctl import usage
from tests.support.audit_rows import create_invocations_table, make_rows, write_rows


@pytest.fixture
def ddb(moto_endpoint: str) -> Any:
    return boto3.client("dynamodb", endpoint_url=moto_endpoint)


@pytest.fixture
def table(ddb: Any) -> str:
    return create_invocations_table(ddb)


def _hand_count(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "calls": len(rows),
        "calls_by_exit_status": dict(sorted(Counter(r["exit_status"] for r in rows).items())),
        "sessions": len({r["session_id"] for r in rows if "session_id" in r}),
        "wall_time_ms": sum(r["duration_ms"] for r in rows),
        "cpu_time_ms": None,
        "estimated_cost_usd": str(
            sum((Decimal(repr(r[n.AUDIT_ATTR_COST])) for r in rows if n.AUDIT_ATTR_COST in r), Decimal(0))
        ),
        "rows_without_cost": sum(1 for r in rows if n.AUDIT_ATTR_COST not in r),
    }


def test_usage_report_totals_equal_a_hand_count_of_the_rows(ddb: Any, table: str) -> None:
    # Given 120 rows of acme (every 10th written before estimated_cost_usd existed) and 30 of globex
    rows = make_rows(120, legacy_every=10)
    write_rows(ddb, table, rows + make_rows(30, tenant_id="globex", seed=3))
    # When the report for acme runs
    report = usage.usage_report(ddb, table, "acme")
    # Then its totals equal the hand count of acme's rows, and globex's rows are not in it
    assert report["totals"] == _hand_count(rows)
    assert report["totals"]["rows_without_cost"] == 12
    assert report["notes"] == [usage.CPU_TIME_NOTE, usage.COST_NOTE]


def test_usage_report_by_day_agent_template_groups_sum_to_the_totals(ddb: Any, table: str) -> None:
    # Given 90 rows over three UTC days, three agents, two templates
    rows = make_rows(90)
    write_rows(ddb, table, rows)
    for by, key in (
        ("day", lambda r: r["started_at"][:10]),
        ("agent", lambda r: r["agent_id"]),
        ("template", lambda r: r["template_id"]),
    ):
        # When grouped
        report = usage.usage_report(ddb, table, "acme", by=by)
        # Then each group equals the hand count of its rows
        expected = {}
        for row in rows:
            expected.setdefault(key(row), []).append(row)
        assert [g["group"] for g in report["groups"]] == sorted(expected), by
        for group in report["groups"]:
            assert {k: v for k, v in group.items() if k != "group"} == _hand_count(
                expected[group["group"]]
            ), by
    assert len(expected) == 2  # the loop ran through to --by template (two templates)


def test_usage_report_window_is_since_inclusive_until_exclusive(ddb: Any, table: str) -> None:
    # Given rows over 2026-11-20 .. 2026-11-22
    rows = make_rows(60)
    write_rows(ddb, table, rows)
    since, until = datetime(2026, 11, 21, tzinfo=UTC), datetime(2026, 11, 22, tzinfo=UTC)
    # When the report covers exactly 2026-11-21
    report = usage.usage_report(ddb, table, "acme", since=since, until=until)
    # Then it holds exactly that day's rows
    inside = [r for r in rows if "2026-11-21T00:00:00.000Z" <= r["started_at"] < "2026-11-22T00:00:00.000Z"]
    assert 0 < len(inside) < len(rows)
    assert report["totals"] == _hand_count(inside)
    # And a row at exactly `until` is outside, a row at exactly `since` inside
    assert usage.query_request(table, "acme", since, until)["ExpressionAttributeValues"][":b"] == {
        "S": "2026-11-21T23:59:59.999Z"
    }


def test_usage_report_reads_with_one_paginated_query_on_the_index_never_a_scan(ddb: Any, table: str) -> None:
    # Given 50 rows and a record of every DynamoDB operation the report's client makes
    write_rows(ddb, table, make_rows(50))
    calls: list[tuple[str, dict[str, Any]]] = []
    ddb.meta.events.register(
        "provide-client-params.dynamodb.*",
        lambda params, model, **_: calls.append((model.name, dict(params))),
    )
    seen: list[tuple[int, int]] = []
    # When the report runs with 7 rows per page
    report = usage.usage_report(
        ddb, table, "acme", page_size=7, progress=lambda rows, pages: seen.append((rows, pages))
    )
    # Then it made only Query calls, on by_tenant_time, through every page
    assert {name for name, _ in calls} == {"Query"}
    assert {p["IndexName"] for _, p in calls} == {"by_tenant_time"}
    assert report["pages"] == len(calls) >= 8
    assert report["totals"]["calls"] == 50
    # And progress was reported after every page, with the running row count
    assert seen[-1] == (50, report["pages"])
    assert [pages for _, pages in seen] == list(range(1, report["pages"] + 1))


def test_usage_report_refuses_an_empty_window_and_an_unknown_grouping(ddb: Any, table: str) -> None:
    # Given a window whose end is before its start / When reported
    # Then a ValueError (the CLI's one-line failure)
    moment = datetime(2026, 11, 21, tzinfo=UTC)
    with pytest.raises(ValueError, match="--until must be after --since"):
        usage.usage_report(ddb, table, "acme", since=moment, until=moment)
    with pytest.raises(ValueError, match="--by must be one of day, agent, template"):
        usage.usage_report(ddb, table, "acme", by="user")


def test_usage_csv_has_one_line_per_group_and_a_total(ddb: Any, table: str) -> None:
    # Given a grouped report
    rows = make_rows(40)
    write_rows(ddb, table, rows)
    report = usage.usage_report(ddb, table, "acme", by="template")
    # When exported as CSV
    lines = usage.to_csv(report).splitlines()
    # Then a header, one line per template, the total last, statuses in their columns
    assert lines[0].split(",") == list(usage.CSV_COLUMNS)
    assert [line.split(",")[0] for line in lines[1:]] == ["analyst", "reporter", "total"]
    total = dict(zip(usage.CSV_COLUMNS, lines[-1].split(","), strict=True))
    hand = _hand_count(rows)
    assert int(total["calls"]) == hand["calls"]
    assert int(total["ok"]) == hand["calls_by_exit_status"].get("ok", 0)
    assert total["estimated_cost_usd"] == hand["estimated_cost_usd"]


def test_stderr_progress_stays_quiet_for_small_reports_and_counts_big_ones() -> None:
    # Given a progress line with a threshold of 100 rows
    stream = io.StringIO()
    progress = usage.StderrProgress(stream, after_rows=100)
    # When a small report reads 60 rows
    progress(60, 1)
    # Then nothing was written
    assert stream.getvalue() == ""
    # When it reads on past the threshold and finishes
    progress(120, 2)
    progress(180, 3)
    progress.done()
    # Then one updating line with the running count, ended by a newline
    assert (
        stream.getvalue() == "\rusage: 120 audit rows read (2 pages)\rusage: 180 audit rows read (3 pages)\n"
    )
