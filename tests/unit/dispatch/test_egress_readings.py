"""dispatch.sessions.egress: an allowlist session's counters read before the call (once the turn
names the session) and beside the artifact helper, and what the call's row and answer make of
them. The egress table, the tenant's substrate and the tenants table are moto's."""

from __future__ import annotations

import json
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from dispatch.parallel import pool
from dispatch.sessions import egress
from dispatch.turns.store import Turn
from sandbox_common import aws
from sandbox_common import naming as n
from sandbox_common.egress_usage import Baseline, Counters
from sandbox_common.errors import SandboxCapExceeded
from sandbox_common.models import ExecuteCodeRequest
from sandbox_common.outcome import Outcome
from sandbox_runtime.egress_store import EgressStore
from sandbox_runtime.preflight import PreflightReader

from infra.local.resources import create_table_request

STAGE = "test"
INTERPRETERS = {"default-public": "sbx_pub", "default-allowlist": "sbx_alw"}

POOL = pool()  # the process's pool, as dispatch sends ahead on it


@pytest.fixture
def parts(moto_endpoint: str) -> tuple[EgressStore, PreflightReader]:
    ddb, ssm = aws.client("dynamodb"), aws.client("ssm")
    for spec in (n.EGRESS, n.TENANTS):
        ddb.create_table(**create_table_request(spec, STAGE))
    ssm.put_parameter(
        Name=n.tenant_substrate_parameter(STAGE, "acme"),
        Value=json.dumps({"tenant_id": "acme", "interpreters": INTERPRETERS, "runner_role_arn": "arn:x"}),
        Type="String",
    )
    store = EgressStore(table_name=n.EGRESS.physical(STAGE), ddb=ddb)
    reader = PreflightReader(
        stage=STAGE, tenants_table=n.TENANTS.physical(STAGE), ttl_seconds=60, ssm=ssm, ddb=ddb
    )
    return store, reader


def _done(value: Any) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result(value)
    return future


def _turn(interpreter_id: str | None, session_id: str | None = "s1") -> Turn:
    return Turn(
        turn_id="t",
        tenant_id="acme",
        agent_id="a",
        session_state=n.TURN_SESSION_ACTIVE if session_id else None,
        session_id=session_id,
        interpreter_id=interpreter_id,
    )


def _counters(session_id: str, item_name: str = n.EGRESS_COUNTERS_ITEM, **fields: Any) -> None:
    """The counters item as the proxy writes it (or `attributed`, as dispatch writes it)."""
    item: dict[str, Any] = {**n.EGRESS.key(session_id, item_name)}
    for name in ("allowed", "denied", "bytes_out", "bytes_in"):
        item[name] = {"N": str(fields.get(name, 0))}
    item["denied_hosts"] = {  # a map by sequence number, as the proxy keeps it
        "M": {str(s): {"M": {"host": {"S": h}, "seq": {"N": str(s)}}} for s, h in fields.get("hosts", [])}
    }
    if fields.get("cap"):
        item["cap_refused"] = {
            "M": {"dimension": {"S": "egress_daily_bytes"}, "count": {"N": str(fields["cap"])}}
        }
    aws.client("dynamodb").put_item(TableName=n.EGRESS.physical(STAGE), Item=item)


def _outcome(session_id: str | None = "s1", environment: str = "default-allowlist") -> Outcome:
    request = ExecuteCodeRequest(
        action="execute_code",
        tenant_id="acme",
        agent_id="a",
        template_id="t",
        turn_id="t",
        call_id="c",
        code="1",
    )
    outcome = Outcome(request=request, invocation_id="inv", started_at=datetime.now(UTC))
    outcome.session_id, outcome.environment = session_id, environment
    return outcome


def test_read_before_reads_only_the_turns_live_allowlist_session(
    parts: tuple[EgressStore, PreflightReader],
) -> None:
    store, reader = parts
    _counters("s1", n.EGRESS_ATTRIBUTED_ITEM, allowed=4, bytes_out=40)
    _counters("s1", allowed=9, bytes_out=90)  # what the proxy counted since: the call's
    # Given turns on the allowlist interpreter, on the public one, without a session
    on_allowlist = egress.read_before(store, reader, _done(_turn("sbx_alw")), _done(None))
    on_public = egress.read_before(store, reader, _done(_turn("sbx_pub")), _done(None))
    without = egress.read_before(store, reader, _done(_turn(None, None)), _done(None))
    no_store = egress.read_before(None, reader, _done(_turn("sbx_alw")), _done(None))
    # Then only the allowlist session's counters were read
    assert on_allowlist == Baseline("s1", Counters(allowed=4, bytes_out=40))
    assert on_public is None and without is None and no_store is None


def test_a_turn_claim_that_failed_leaves_no_baseline(parts: tuple[EgressStore, PreflightReader]) -> None:
    store, reader = parts
    failed: Future[Turn] = Future()
    failed.set_exception(RuntimeError("wrong token"))
    before = Future[Baseline | None]()
    try:
        before.set_result(egress.read_before(store, reader, failed, _done(None)))
    except RuntimeError as exc:
        before.set_exception(exc)
    assert egress.baseline(before) is None


def test_the_row_gets_the_difference_and_the_egress_cap_refuses_the_answer(
    parts: tuple[EgressStore, PreflightReader],
) -> None:
    store, _ = parts
    # Given a call that started from a reading, and the proxy that counted (and refused at the cap)
    _counters("s1", allowed=5, denied=3, bytes_out=500, bytes_in=7000, hosts=[(3, "evil.example")], cap=1)
    outcome = _outcome()
    outcome.egress_baseline = Baseline("s1", Counters(allowed=2, denied=2, bytes_out=100, bytes_in=1000))
    # When the end reading goes out beside the artifacts and is settled
    reading = egress.settle(outcome, egress.start_after(store, outcome, POOL))
    for item in egress.attributed_items(store, outcome, reading, 900):  # what the record carries
        aws.client("dynamodb").put_item(**item["Put"])
    # Then the row's egress is the difference, and the answer is the cap refusal naming it
    assert outcome.egress == {
        "mode": "allowlist",
        "allowed": 3,
        "denied": 1,
        "denied_hosts": ["evil.example"],
        "bytes_out": 400,
        "bytes_in": 6000,
    }
    assert isinstance(outcome.failure, SandboxCapExceeded)
    body = outcome.failure.to_response()
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT00:00:00Z")
    assert (body["dimension"], body["resets_at"]) == ("egress_daily_bytes", tomorrow)
    assert outcome.exit_status == "cap_exceeded"
    # And the next call of the session starts where this row ended
    assert store.attributed("s1") == Counters(
        allowed=5, denied=3, bytes_out=500, bytes_in=7000, cap_refused=("egress_daily_bytes", 1)
    )


def test_attributed_never_moves_back(parts: tuple[EgressStore, PreflightReader]) -> None:
    store, _ = parts
    # Given a later reading recorded first (a call that read later but ended sooner)
    assert store.attribute("s1", Counters(allowed=5, bytes_out=50), 900) is True
    # When an earlier reading comes / Then it is refused, and a later one still lands
    assert store.attribute("s1", Counters(allowed=4, bytes_out=60), 900) is False
    assert store.attributed("s1") == Counters(allowed=5, bytes_out=50)
    assert store.attribute("s1", Counters(allowed=6, bytes_out=70), 900) is True


def test_a_public_call_reads_nothing_and_an_unreadable_end_leaves_zeros(
    parts: tuple[EgressStore, PreflightReader],
) -> None:
    store, _ = parts
    assert egress.start_after(store, _outcome(environment="default-public"), POOL) is None
    assert egress.start_after(store, _outcome(session_id=None), POOL) is None
    # Given a table that cannot be read at the end
    outcome = _outcome()
    broken = EgressStore(table_name="no-such-table", ddb=aws.client("dynamodb"))
    # When settled / Then the call keeps its answer and its row says zeros
    assert egress.settle(outcome, egress.start_after(broken, outcome, POOL)) is None
    assert egress.attributed_items(broken, outcome, None, 900) == []
    assert outcome.egress is None and outcome.failure is None
    assert outcome.finish().audit_row(30)[n.AUDIT_ATTR_EGRESS]["allowed"] == 0
