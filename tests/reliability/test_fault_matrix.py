"""Fault-injection matrix: every dependency × every fault through the real stack.

Each cell runs one `execute_code` of a fresh turn (and, for Stop, the `end_turn` after it) with
the fault armed, then checks what the dispatch contract, the breakers, the session runner and the
audit trail promise ([failure-behaviour.md](../../docs/failure-behaviour.md)):
- the agent sees the named error for that failure (fail closed where the breakers do);
- exactly one audit row for the call — in the table or, when the audit table is the faulty
  dependency, its dead-letter copy;
- no orphaned session: after the turn ends the local interpreter runs no session of this cell;
- no double count: the cell's own agent-hourly counter is 1 if the quota Lambda counted it, else 0.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sandbox_common import aws, dimensions
from sandbox_common import naming as n

from tests.support.stack import Stack, event

from .faults import FAULTS, NESTED, FaultProxy, HookFaults, black_hole, hanging_socket, tables_in

DEPENDENCIES = (
    "ssm_caps",
    "ssm_substrate",
    "ssm_price",
    "counters",
    "turns",
    "tenants",
    "audit",
    "idempotency",
    "quota_invoke",
    "sts",
    "start",
    "readiness",
    "invoke",
    "stop",
    # an allowlist session's egress (its cells run the `allowlisted` template, with the real proxy)
    "egress_credential",
    "egress_counters",
    "egress_revoke",
)
EGRESS_DEPENDENCIES = ("egress_credential", "egress_counters", "egress_revoke")
INVOKE_TIMEOUT_SECONDS = 3  # the runner's per-call deadline in the invoke/timeout cell


@dataclass(frozen=True)
class Expect:
    error: str | None  # None: the call succeeds
    exit_status: str
    counted: int  # how often the quota Lambda counted the call: 0 or 1, never more
    reason: str | None = None
    dimension: str | None = None

    def describe(self) -> str:
        text = self.error or "ok"
        if self.reason:
            text += f" ({self.reason})"
        if self.dimension:
            text += f" ({self.dimension}, +60 s)"
        return text + (", counted once" if self.counted else ", not counted")


_CAP_UNKNOWN = Expect("SandboxCapExceeded", "cap_exceeded", 0, dimension=dimensions.UNKNOWN)
_PREFLIGHT = Expect("SandboxProvisioning", "provisioning", 0, reason="preflight_unavailable")
_OK = Expect(None, "ok", 1)
_RUNNER_ERROR = Expect("SandboxError", "error", 1)
EXPECT: dict[str, Expect] = {
    "ssm_caps": _CAP_UNKNOWN,  # unreadable cap with no cached value -> fail closed
    "ssm_substrate": _PREFLIGHT,  # pre-flight dependency down -> provisioning, nothing counted
    "ssm_price": _OK,  # the cost estimate never fails a call
    "counters": _CAP_UNKNOWN,  # counter store error/throttling -> fail closed
    "turns": _PREFLIGHT,
    "tenants": _PREFLIGHT,
    "audit": _OK,  # a write failure never changes the agent's result (row -> DLQ)
    "idempotency": Expect("SandboxError", "error", 0),  # no idempotency -> refuse before counting
    "quota_invoke": _CAP_UNKNOWN,  # quota Lambda unreachable/erroring -> fail closed
    "sts": _RUNNER_ERROR,  # counted (quota ran), not refunded
    "start": _RUNNER_ERROR,
    "readiness": Expect("SandboxProvisioning", "provisioning", 1, reason="readiness_check_failed"),
    "invoke": _RUNNER_ERROR,
    "stop": _OK,  # the call itself is fine; end_turn must still answer
    # no credential, no session: stopped before any code, a start failure (counted, not refunded)
    "egress_credential": Expect("SandboxProvisioning", "provisioning", 1, reason="egress_unavailable"),
    "egress_counters": _OK,  # the row's egress figures are a record: never the call's failure
    "egress_revoke": _OK,  # end_turn still stops the session (the credential ends at its expiry)
}
_CAP_UNKNOWN_COUNTED = Expect("SandboxCapExceeded", "cap_exceeded", 1, dimension=dimensions.UNKNOWN)
OVERRIDES: dict[tuple[str, str], Expect] = {
    ("invoke", "timeout"): Expect("SandboxTimeout", "timeout", 1),  # the runner's deadline
    # The quota Lambda ran and counted, its answer was lost: refused (fail closed), counted once
    # (not refunded) — and never twice.
    ("quota_invoke", "5xx"): _CAP_UNKNOWN_COUNTED,
    ("quota_invoke", "malformed"): _CAP_UNKNOWN_COUNTED,
    # botocore reads an unparseable 200 of a JSON-protocol service as an empty success; the
    # write behind it was applied, so the call proceeds normally: nothing to fail closed on.
    ("counters", "malformed"): _OK,
    ("turns", "malformed"): _OK,
    ("idempotency", "malformed"): _OK,
    ("egress_credential", "malformed"): _OK,
}
# Cells that fail today because of a product bug (strict xfail: a fix turns them into failures
# until this list is updated). Each is described, with the fix, in the report below the matrix.
# Product bugs this matrix found, each fixed in the product (quota invoke retried once;
# malformed tenants/SSM answers failing open or as internal errors; lost Start answers leaving
# orphans; end_turn hiding a failed Stop). A cell listed here runs as a strict xfail.
KNOWN_BUGS: dict[tuple[str, str], str] = {}
QUICK_CELLS = {(d, FAULTS[i % len(FAULTS)]) for i, d in enumerate(DEPENDENCIES)}
# Every fault of the audit write in the quick run too: every call's row travels inside its
# idempotency completion's transaction, and each fault takes a different fallback.
QUICK_CELLS |= {("audit", fault) for fault in FAULTS}
DISABLED_TENANT = "globex"  # the tenants cells: a pre-flight fault must never let a disabled tenant run

# Cells beyond dependency x fault, each where a crash path of its own lives: an answer of the
# session's own channel nested deeper than the parser goes is a protocol error that ends the
# session (the next call starts a fresh one), for the user's code and for the readiness preamble.
EXTRA_CELLS = [("invoke", NESTED), ("readiness", NESTED)]
QUICK_CELLS |= set(EXTRA_CELLS)
CELLS = [(d, f) for d in DEPENDENCIES for f in FAULTS] + EXTRA_CELLS


@pytest.fixture(scope="module")
def fault_tools(shared_stack: Stack) -> Iterator[tuple[FaultProxy, Any, Any]]:
    proxy = FaultProxy(shared_stack.moto)
    drop, hang = black_hole(), hanging_socket()
    shared_stack.restart_quota(proxy.endpoint)  # the quota Lambda's AWS calls go through the proxy
    yield proxy, drop, hang
    shared_stack.restart_quota()
    proxy.close()
    drop.close()
    hang.close()


def _counted(stack: Stack, agent_id: str) -> int:
    items = stack.counter_items()[n.AGENT_HOURLY_COUNTERS.logical]
    return sum(
        int(i[n.COUNTER_ATTR_COUNT]["N"])
        for i in items
        if i.get(n.COUNTER_ATTR_AGENT, {}).get("S") == agent_id
    )


def _dlq_rows(stack: Stack, call_id: str) -> int:
    messages = (
        aws.client("sqs")
        .receive_message(QueueUrl=stack.resources.audit_dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=0)
        .get("Messages", [])
    )
    return sum(1 for m in messages if json.loads(m["Body"]).get("call_id") == call_id)


def replay_target(stack: Stack) -> Any:
    """What `sandboxctl audit replay` drains the DLQ with, bound to this stack."""
    from infra.sandboxctl.target import Target

    return Target(
        stage="local",
        local=True,
        tables=dict(stack.resources.tables),
        dispatch_function=stack.resources.functions[n.DISPATCH],
        quota_function=stack.resources.functions[n.QUOTA_CHECK],
        audit_dlq_url=stack.resources.audit_dlq_url,
        _make_client=aws.client,
    )


def _arm(dependency: str, fault: str, stack: Stack, hooks: HookFaults, proxy: FaultProxy, code: str) -> None:
    from dispatch.quota import client as quota_client
    from sandbox_runtime.runner import credentials

    tables = stack.resources.tables

    def table(logical: str) -> Any:
        return lambda request: tables[logical] in tables_in(request.body)

    ddb = aws.client("dynamodb").meta.events
    agentcore = credentials.tenant_session.events  # every runner client is built from it
    if dependency == "ssm_caps":
        stack.restart_quota(proxy.endpoint)  # fresh containers: no cap value cached yet
        proxy.set(fault, {"GetParameter", "GetParameters", "GetParametersByPath"})
    elif dependency == "counters":
        proxy.set(fault, {"TransactWriteItems"})
    elif dependency == "ssm_substrate":
        name = n.tenant_substrate_parameter("local", "acme").encode()
        hooks.arm(aws.client("ssm").meta.events, "ssm", fault, match=lambda r: name in (r.body or b""))
    elif dependency == "ssm_price":
        name = n.cost_per_call_parameter("local").encode()
        hooks.arm(aws.client("ssm").meta.events, "ssm", fault, match=lambda r: name in (r.body or b""))
    elif dependency == "turns":
        hooks.arm(ddb, "dynamodb", fault, match=table(n.TURNS.logical))
    elif dependency == "tenants":
        hooks.arm(ddb, "dynamodb", fault, match=table(n.TENANTS.logical))
    elif dependency == "audit":
        hooks.arm(ddb, "dynamodb", fault, match=table(n.INVOCATIONS.logical))
    elif dependency == "idempotency":
        hooks.arm(ddb, "dynamodb", fault, match=table(n.IDEMPOTENCY.logical))
    elif dependency == "quota_invoke":
        hooks.arm(quota_client.lambda_client().meta.events, "lambda", fault)
    elif dependency == "sts":
        hooks.arm(aws.client("sts").meta.events, "sts", fault, operations={"AssumeRole"})
    elif dependency == "start":
        hooks.arm(agentcore, "bedrock-agentcore", fault, operations={"StartCodeInterpreterSession"})
    elif dependency == "readiness":  # the preamble invoke: everything but the user's code
        hooks.arm(
            agentcore,
            "bedrock-agentcore",
            fault,
            operations={"InvokeCodeInterpreter"},
            match=lambda r: not _carries(r, code),
        )
    elif dependency == "invoke":
        hooks.arm(
            agentcore,
            "bedrock-agentcore",
            fault,
            operations={"InvokeCodeInterpreter"},
            match=lambda r: _carries(r, code),
            hang=True,
        )
    elif dependency == "stop":
        hooks.arm(agentcore, "bedrock-agentcore", fault, operations={"StopCodeInterpreterSession"})
    elif dependency == "egress_credential":  # the runner's issue of the session's credential
        hooks.arm(ddb, "dynamodb", fault, operations={"PutItem"}, match=_egress_item(tables, "credential"))
    elif dependency == "egress_counters":  # the reading of the session's counters after the code
        hooks.arm(ddb, "dynamodb", fault, operations={"GetItem"}, match=_egress_item(tables, "counters"))
    elif dependency == "egress_revoke":  # the revocation before end_turn's stop
        hooks.arm(ddb, "dynamodb", fault, operations={"UpdateItem"}, match=_egress_item(tables, "credential"))
    else:  # pragma: no cover
        raise AssertionError(dependency)


def _egress_item(tables: dict[str, str], item: str) -> Any:
    """A request for one item of the egress table (naming.EGRESS: `credential`, `counters`)."""

    def match(request: Any) -> bool:
        try:
            doc = json.loads(request.body or b"{}")
        except ValueError:
            return False
        key = doc.get("Key") or doc.get("Item") or {}
        named = key.get(n.EGRESS.sort_key, {}).get("S") if isinstance(key, dict) else None
        return doc.get("TableName") == tables[n.EGRESS.logical] and named == item

    return match


def _carries(request: Any, code: str) -> bool:
    """The request is the user's executeCode: its driver carries the code as base64."""
    return base64.b64encode(code.encode()).decode().encode() in (request.body or b"")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every cell under `make reliability`; one fault per dependency (rotating) in `make test`."""
    if {"dependency", "fault"} <= set(metafunc.fixturenames):
        full = metafunc.config.getoption("--reliability-full")
        cells = CELLS if full else [c for c in CELLS if c in QUICK_CELLS]
        metafunc.parametrize(("dependency", "fault"), cells, ids=[f"{d}-{f}" for d, f in cells])


def test_fault(
    dependency: str,
    fault: str,
    live: Stack,
    fault_tools: tuple[FaultProxy, Any, Any],
    monkeypatch: pytest.MonkeyPatch,
    record: Any,
    request: pytest.FixtureRequest,
) -> None:
    if (dependency, fault) in KNOWN_BUGS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[(dependency, fault)]))
    stack = live
    proxy, drop, hang = fault_tools
    expect = OVERRIDES.get((dependency, fault), EXPECT[dependency])
    if (dependency, fault) == ("invoke", "timeout"):
        from dispatch import parts as dependencies
        from sandbox_common import settings

        monkeypatch.setenv(n.ENV_CALL_TIMEOUT, str(INVOKE_TIMEOUT_SECONDS))
        settings.clear_caches()
        dependencies.reset()
    cell = f"{dependency}-{fault}".replace("_", "-")
    ids = {"agent_id": f"ag-{cell}", "turn_id": f"tu-{cell}", "call_id": f"ca-{cell}"}
    if dependency in EGRESS_DEPENDENCIES:
        request.getfixturevalue("egress_proxy")  # the real proxy: the session's readiness binds there
        ids["template_id"] = "allowlisted"
    tenant = {"tenant_id": DISABLED_TENANT} if dependency == "tenants" else {}
    if tenant:
        aws.client("dynamodb").put_item(
            TableName=stack.resources.tables[n.TENANTS.logical],
            Item={
                n.TENANTS.pk: {"S": DISABLED_TENANT},
                n.TENANTS.sk: {"S": n.TENANT_POLICY_ITEM},
                "sandbox_enabled": {"BOOL": False},
            },
        )
    marker = f"cell {cell}"
    code = f"print({marker!r})"
    sessions_before = set(stack.live_sessions())
    hooks = HookFaults(drop=drop, hang=hang)
    started = datetime.now(UTC)

    # Given the fault armed on one dependency
    _arm(dependency, fault, stack, hooks, proxy, code)
    # When one execute_code of a fresh turn runs (and, for Stop, the end_turn after it)
    end: dict[str, Any] | None = None
    try:
        response = stack.dispatch(event(code=code, **ids, **tenant))
        if dependency in ("stop", "egress_revoke"):
            end = stack.dispatch(event("end_turn", turn_id=ids["turn_id"]))
    finally:
        injected = hooks.injected + proxy.injected
        hooks.disarm()
        proxy.set(None)
    # The agent ends its turn (for Stop: retries end_turn, now that AgentCore answers again).
    stack.dispatch(event("end_turn", turn_id=ids["turn_id"], **tenant))
    leaked_at_end = set(stack.live_sessions()) - sessions_before
    for session_id in leaked_at_end:  # keep later cells clean; the leak is still reported
        session = stack.interpreter.session(session_id)
        if session is not None:
            stack.interpreter.manager.terminate(session, "stopped")
    if tenant:
        aws.client("dynamodb").delete_item(
            TableName=stack.resources.tables[n.TENANTS.logical],
            Key={n.TENANTS.pk: {"S": DISABLED_TENANT}, n.TENANTS.sk: {"S": n.TENANT_POLICY_ITEM}},
        )
    dlq = _dlq_rows(stack, ids["call_id"])
    if dlq:  # what the operator does when the DLQ alarm fires: `sandboxctl audit replay`
        from infra.sandboxctl.records_ops import audit_replay

        audit_replay(replay_target(stack))
    rows = [r for r in stack.audit_rows() if r["call_id"] == ids["call_id"]]
    left_in_dlq = _dlq_rows(stack, ids["call_id"])
    counted = _counted(stack, ids["agent_id"])
    outcome = response.get("error") or "ok"
    if response.get("reason") or response.get("dimension"):
        outcome += f" ({response.get('reason') or response.get('dimension')})"
    if end is not None:
        outcome += f"; end_turn {json.dumps(end, sort_keys=True)}"
    record(
        "faults",
        dependency=dependency,
        fault=fault,
        injected=injected,
        outcome=outcome,
        audit_rows=len(rows),
        dlq_rows=dlq,
        leaked_sessions=len(leaked_at_end),
        counted=counted,
        expected=expect.describe(),
    )

    # Then the fault really happened
    assert injected >= 1, "the fault was never triggered: the cell proves nothing"
    # And the agent sees the SPEC's named error (or success where the SPEC tolerates the fault)
    assert response.get("error") == expect.error, response
    assert response["exit_status"] == expect.exit_status, response
    assert response.get("ok") is (expect.error is None), response
    assert "Traceback" not in json.dumps(response)
    if expect.reason:
        assert response.get("reason") == expect.reason, response
    if expect.dimension:
        assert response["dimension"] == expect.dimension, response
        resets_at = datetime.strptime(response["resets_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        assert started + timedelta(seconds=58) <= resets_at <= datetime.now(UTC) + timedelta(seconds=61)
    # And exactly one audit row for the call: written, or dead-lettered and replayed exactly once
    assert len(rows) == 1 and left_in_dlq == 0, (rows, dlq, left_in_dlq)
    if dependency != "audit":
        assert dlq == 0
    if rows:
        assert rows[0]["exit_status"] == expect.exit_status
    # And no double count
    assert counted == expect.counted
    # And no orphaned session once the turn is over
    assert leaked_at_end == set()
    if end is not None:
        assert end["ok"] is True, end
