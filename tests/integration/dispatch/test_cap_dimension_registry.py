"""A cap dimension declared only in the registry (`sandbox_common.dimensions`) works end to end:
`sandboxctl caps set` accepts it and writes its parameter, the quota Lambda counts it in the same
transaction as the others, and dispatch refuses the call that would exceed it with a
SandboxCapExceeded that names it literally.

`agent_daily` (calls per agent per UTC day) exists only in this test: it is one entry added to
`dimensions.DIMENSIONS`, nothing else. The quota Lambda runs in-process here (its handler called
with the invoke's payload, as the Lambda emulator's worker does), so that it sees the entry too.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from sandbox_common import aws, dimensions
from sandbox_common import naming as n
from sandbox_common.windows import Windows, utc_now

from infra.cdk.config import build_config
from infra.cdk.function_env import function_environment
from tests.conftest import LambdaContext
from tests.support.stack import Stack, event

AGENT_DAILY = dimensions.Dimension(
    "agent_daily",
    dimensions.Kind.CALLS,
    default=50,
    wording="I've hit this assistant's daily code-execution cap",
    key=(n.COUNTER_ATTR_TENANT, n.COUNTER_ATTR_AGENT),
    window=dimensions.Window.DAY,
    table=n.TENANT_DAILY_COUNTERS,
    marker_attribute="agent_daily_key",
)


class InProcessQuota:
    """The quota Lambda's invoke, answered by its handler in this process."""

    def __init__(self, function_name: str) -> None:
        self.function_name = function_name

    def invoke(self, *, FunctionName: str, InvocationType: str, Payload: bytes) -> dict[str, Any]:  # noqa: N803
        from quota_check.handler import handler

        assert FunctionName == self.function_name and InvocationType == "RequestResponse"
        answer = handler(json.loads(Payload), LambdaContext(function_name=FunctionName))
        return {"StatusCode": 200, "Payload": io.BytesIO(json.dumps(answer).encode())}


@pytest.fixture
def agent_daily(stack: Stack) -> Iterator[dimensions.Dimension]:
    from dispatch.quota import client as quota_client
    from quota_check import caps
    from sandbox_common import settings

    quota_env = function_environment(
        build_config("local"),
        n.QUOTA_CHECK,
        tables=stack.resources.tables,
        quota_function_name=stack.resources.functions[n.QUOTA_CHECK],
        audit_dlq_url=stack.resources.audit_dlq_url,
    )
    # undone before the stack's own teardown (which clears the real Lambda client's cache)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dimensions, "DIMENSIONS", (*dimensions.DIMENSIONS, AGENT_DAILY))
        for key, value in quota_env.items():
            patch.setenv(key, value)
        settings.clear_caches()
        caps.clear_caches()
        quota = InProcessQuota(stack.resources.functions[n.QUOTA_CHECK])
        patch.setattr(quota_client, "lambda_client", lambda: quota)
        yield AGENT_DAILY
    settings.clear_caches()
    caps.clear_caches()


def _sandboxctl(stack: Stack, monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    """`sandboxctl` in-process (its argument parser and commands), aimed at this stack's stage."""
    from infra.sandboxctl import main, target

    aimed = target.Target(
        stage="local",
        local=True,
        tables=dict(stack.resources.tables),
        dispatch_function=stack.resources.functions[n.DISPATCH],
        quota_function=stack.resources.functions[n.QUOTA_CHECK],
        audit_dlq_url=stack.resources.audit_dlq_url,
        _make_client=aws.client,
    )
    monkeypatch.setattr(target, "resolve", lambda stage, local: aimed)
    return main.main(["--local", "--json", *argv])


def _count(stack: Stack, dimension: dimensions.Dimension) -> int | None:
    assert dimension.table is not None
    key = dimension.counter_key({"tenant_id": "acme", "agent_id": "agent-7"}, Windows.at(utc_now()))
    item = (
        aws.client("dynamodb")
        .get_item(
            TableName=stack.resources.tables[dimension.table.logical],
            Key={dimension.table.pk: {"S": key}},
            ConsistentRead=True,
        )
        .get("Item")
    )
    return None if item is None else int(item[n.COUNTER_ATTR_COUNT]["N"])


def test_cap_dimension_declared_only_in_the_registry_is_set_counted_and_refused(
    stack: Stack,
    agent_daily: dimensions.Dimension,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given agent_daily set with sandboxctl: the stage-wide value and acme's override of 2
    written = []
    for argv in (("50",), ("2", "--tenant", "acme")):
        assert _sandboxctl(stack, monkeypatch, "caps", "set", agent_daily.name, *argv) == 0
        written.append(json.loads(capsys.readouterr().out)["parameter"])
    assert written == [agent_daily.parameter("local"), agent_daily.parameter("local", "acme")]
    ssm = aws.client("ssm")
    assert ssm.get_parameter(Name=agent_daily.parameter("local", "acme"))["Parameter"]["Value"] == "2"
    # When acme's agent runs three calls in one turn
    answers = [stack.dispatch(event(call_id=f"c{i}", code=f"print({i})")) for i in range(3)]
    # Then the first two are admitted and counted in agent_daily (beside the other windows) ...
    assert [a["ok"] for a in answers] == [True, True, False], answers
    assert _count(stack, agent_daily) == 2
    assert _count(stack, dimensions.AGENT_HOURLY) == 2
    # ... and the third is refused on agent_daily, named literally in the agent's message
    refused = answers[2]
    assert refused["error"] == "SandboxCapExceeded"
    assert refused["dimension"] == agent_daily.name
    assert f"(cap: {agent_daily.name})" in refused["error_message"]
    assert "daily code-execution cap" in refused["error_message"]
    assert refused["resets_at"] == f"{Windows.at(utc_now()).day_resets_at:%Y-%m-%dT%H:%M:%SZ}"
    # And the refusal counted nothing, and left its one audit row
    assert _count(stack, agent_daily) == 2
    rows = {r["call_id"]: r for r in stack.audit_rows("acme")}
    assert rows["c2"]["exit_status"] == "cap_exceeded"
    assert rows["c2"]["failure_reason"] == f"cap_exceeded:{agent_daily.name}"


def test_cap_dimension_registry_entries_are_distinct_counters() -> None:
    # Given every calls dimension of the registry
    counted = dimensions.calls()
    assert len(counted) >= 2  # the check below compares pairs
    # Then no two share a counter (same table, key fields and window) or a marker attribute
    shapes = [(d.table, d.key, d.window) for d in counted]
    assert len(set(shapes)) == len(shapes)
    assert len({d.marker_attribute for d in counted}) == len(counted)
    assert len(set(dimensions.names())) == len(dimensions.names())
