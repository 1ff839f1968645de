"""Benchmark `aws_calls_per_execute_code`: which AWS API calls one `execute_code`
costs, by service and operation, for the first call of a turn and for a later call.

Target: a later call makes no SSM call and no pre-flight read beyond cache, one user-code
InvokeCodeInterpreter (+ the artifact helper), one counter transaction and one audit row (inside
the idempotency completion's transaction); a first call adds only StartCodeInterpreterSession,
one readiness invoke and the turn-state write.
`critical_path_depth`: the longest chain of requests that waited on each other.

Everything runs for real (the dispatch integration harness): moto in server mode, the local
AgentCore interpreter, the quota Lambda in the local Lambda emulator (its own worker process),
dispatch in-process with its CDK environment. Calls are counted at two places:

- in the dispatch process, a botocore `before-parameter-build` hook on EVERY client created from a botocore
  session (the cached `sandbox_common.aws` clients, the quota Lambda client, the runner's
  tenant-scoped AgentCore clients, the Powertools idempotency client): one record per API call;
- at moto's WSGI app, one record per HTTP request that reaches it, whoever sent it. The quota
  Lambda's calls are the ones whose User-Agent carries `exec-env/AWS_Lambda…`: botocore adds
  that from AWS_EXECUTION_ENV, which the emulator sets in its workers as the Lambda runtime does
  (and the in-process dispatch does not). Those are the quota function's calls, read from the
  wire without touching its code or process.
The two views cross-check: every dispatch call bound for moto is seen once on each side, so a
client that escaped the hook would show up as a mismatch.
"""

from __future__ import annotations

import functools
import io
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import pytest
from sandbox_common import naming as n

from tests.benchmarks._report import emit
from tests.support import stack as harness
from tests.support.stack import Stack, event

pytestmark = pytest.mark.bench

# The shared real-parts harness (moto server, local interpreter, quota Lambda in the emulator).
interpreter = harness.interpreter
stack = harness.stack

DISPATCH, QUOTA = "dispatch", "quota"
_CREDENTIAL_SCOPE = re.compile(r"Credential=[^/]+/\d{8}/[^/]+/([^/]+)/aws4_request")
_LAMBDA_EXEC_ENV = "exec-env/AWS_Lambda"
# Every other service reaches moto (AWS_ENDPOINT_URL); these two have their own local endpoints.
NOT_ON_MOTO = frozenset({"lambda", "bedrock-agentcore"})
# moto's signing-name view of a service -> botocore's service name (what the client hook records)
_SIGNING_TO_SERVICE = {"monitoring": "cloudwatch"}

# The completed idempotency record and the call's audit row: both land or neither.
COMPLETION = (
    f"{DISPATCH}:dynamodb:TransactWriteItems"
    f"[{'+'.join(sorted((n.IDEMPOTENCY.logical, n.INVOCATIONS.logical)))}]"
)
_COUNTER_TRANSACTION = "+".join(
    sorted(t.logical for t in (n.AGENT_HOURLY_COUNTERS, n.TENANT_DAILY_COUNTERS, n.TENANTS, n.TURNS))
)
# A later call of a turn, every call justified. Keys: origin:service:Operation[logical table].
LATER_CALL_ALLOWED: dict[str, tuple[int, str]] = {
    f"{DISPATCH}:dynamodb:PutItem[{n.IDEMPOTENCY.logical}]": (
        1,
        "Powertools idempotency: in-progress record",
    ),
    f"{DISPATCH}:dynamodb:GetItem[{n.TURNS.logical}]": (1, "turn ownership + the turn's live session"),
    f"{DISPATCH}:lambda:Invoke": (
        1,
        "the quota check, sent at t=0 beside the idempotency claim",
    ),
    f"{DISPATCH}:bedrock-agentcore:InvokeCodeInterpreter": (
        2,
        (
            "the user code, then artifact collection: the helper (executeCode); its answer file "
            "is read (readFiles) only when it found something"
        ),
    ),
    COMPLETION: (1, "the completed idempotency record and the audit row, one transaction"),
    f"{QUOTA}:dynamodb:TransactWriteItems[{_COUNTER_TRANSACTION}]": (
        1,
        "the counter transaction with the turn guard's, the tenant policy's and the breaker "
        "version's ConditionChecks and the call's counted marker",
    ),
}
# What the first call of a turn (after begin_turn, warm container) adds, exactly.
FIRST_CALL_EXTRA: dict[str, tuple[int, str]] = {
    f"{DISPATCH}:bedrock-agentcore:StartCodeInterpreterSession": (1, "the turn's one session"),
    f"{DISPATCH}:bedrock-agentcore:InvokeCodeInterpreter": (1, "the readiness preamble"),
    f"{DISPATCH}:dynamodb:UpdateItem[{n.TURNS.logical}]": (
        2,
        "turn state: conditional 'starting' lease before Start + 'active' with the session id after",
    ),
    f"{DISPATCH}:dynamodb:TransactWriteItems[{n.SESSIONS.logical}]": (1, "the session's slot, capped"),
    f"{DISPATCH}:dynamodb:UpdateItem[{n.SESSIONS.logical}]": (
        1,
        "the slot holds the started session",
    ),
}
# What a first call that claims a warm session adds to a later call, exactly:
# the claim of the session begin_turn noted on the turn and the turn's binding, in ONE write.
WARM_FIRST_CALL_EXTRA: dict[str, tuple[int, str]] = {
    f"{DISPATCH}:dynamodb:TransactWriteItems[{'+'.join(sorted((n.SESSIONS.logical, n.TURNS.logical)))}]": (
        1,
        "the claim: the pool slot and the turn binding, one conditional transaction",
    ),
}
# What begin_turn pays for it (before the agent has any code): it always reads the pool (one
# Query, `begin_turn` below reads an empty one) and notes what it found on the turn: a warm session
# (the hint, not a claim) or "empty" (the first call then does not read the pool again).
BEGIN_TURN_POOL_NOTE: dict[str, tuple[int, str]] = {
    f"{DISPATCH}:dynamodb:Query[{n.SESSIONS.logical}]": (1, "the warm pool (by_warm_pool)"),
    f"{DISPATCH}:dynamodb:UpdateItem[{n.TURNS.logical}]": (1, "the warm hint, or the pool found empty"),
}


@dataclass(frozen=True)
class Call:
    origin: str  # dispatch | quota
    service: str  # botocore service name
    operation: str
    tables: tuple[str, ...] = ()  # physical table names

    def key(self, logical_of: dict[str, str]) -> str:
        suffix = f"[{'+'.join(sorted({logical_of.get(t, t) for t in self.tables}))}]" if self.tables else ""
        return f"{self.origin}:{self.service}:{self.operation}{suffix}"


def tables_in(params: dict[str, Any]) -> tuple[str, ...]:
    """Table names a DynamoDB request touches (single-table, batch and transact shapes)."""
    found: list[str] = []
    if isinstance(params.get("TableName"), str):
        found.append(params["TableName"])
    for batch in ("RequestItems",):
        if isinstance(params.get(batch), dict):
            found.extend(params[batch])
    for item in params.get("TransactItems") or ():
        for action in item.values():
            if isinstance(action, dict) and isinstance(action.get("TableName"), str):
                found.append(action["TableName"])
    return tuple(sorted(set(found)))


_ATTEMPT = re.compile(r"attempt=(\d+)")


def describe_wire_request(environ: dict[str, Any]) -> Call | None:
    """The AWS call one HTTP request to moto carries (None for moto's own /moto-api, and for
    botocore's retry of a request already counted: a loaded machine can time out a first attempt
    that moto still served, and an API call is counted once, as the client-side hook counts it)."""
    if environ.get("PATH_INFO", "").startswith("/moto-api"):
        return None
    attempt = _ATTEMPT.search(environ.get("HTTP_AMZ_SDK_REQUEST", ""))
    if attempt and int(attempt.group(1)) > 1:
        return None
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)  # moto reads it again
    scope = _CREDENTIAL_SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
    signing = scope.group(1) if scope else "unknown"
    service = _SIGNING_TO_SERVICE.get(signing, signing)
    origin = QUOTA if _LAMBDA_EXEC_ENV in environ.get("HTTP_USER_AGENT", "") else DISPATCH
    target = environ.get("HTTP_X_AMZ_TARGET")
    params: dict[str, Any] = {}
    if target:  # JSON protocol (DynamoDB, SSM, SQS, Logs)
        operation = target.rsplit(".", 1)[-1]
        try:
            params = json.loads(body or b"{}")
        except ValueError:
            params = {}
    elif "/operation/" in environ.get("PATH_INFO", ""):  # smithy rpc-v2-cbor
        operation = environ["PATH_INFO"].rsplit("/", 1)[-1]
    else:  # query protocol (STS, IAM)
        form = parse_qs(body.decode("utf-8", "replace")) or parse_qs(environ.get("QUERY_STRING", ""))
        operation = (form.get("Action") or ["unknown"])[0]
    return Call(origin, service, operation, tables_in(params) if service == "dynamodb" else ())


Span = tuple[float, float, Call]  # (perf_counter start, end, call)


class WireLog:
    """WSGI middleware in front of moto's app: one Call per request that reaches moto, and its
    span (moto runs in this process, so its clock is the test's)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.calls: list[Call] = []
        self.spans: list[Span] = []
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        call = describe_wire_request(environ)
        started = time.perf_counter()
        if call is not None:
            with self._lock:
                self.calls.append(call)
        body = self.app(environ, start_response)
        if call is not None:
            with self._lock:
                self.spans.append((started, time.perf_counter(), call))
        return body


class ClientLog:
    """Hook on every botocore client created in this (the dispatch) process. It listens to
    `before-parameter-build`: emitted once per API call (not per retry) with the caller's own
    parameters (`before-call` carries the serialized request instead)."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.spans: list[Span] = []
        self._lock = threading.Lock()

    def record(
        self, service: str, model: Any = None, params: Any = None, context: Any = None, **_: Any
    ) -> None:
        tables = tables_in(params or {}) if service == "dynamodb" else ()
        call = Call(DISPATCH, service, model.name, tables)
        if isinstance(context, dict):  # the same dict reaches after-call: the span of this API call
            context["_bench_span"] = (time.perf_counter(), call)
        with self._lock:
            self.calls.append(call)

    def finish(self, context: Any = None, **_: Any) -> None:
        started = context.get("_bench_span") if isinstance(context, dict) else None
        if started is not None:
            with self._lock:
                self.spans.append((started[0], time.perf_counter(), started[1]))

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import botocore.session

        original = botocore.session.Session.create_client
        log = self

        def create_client(session: Any, *args: Any, **kwargs: Any) -> Any:
            client = original(session, *args, **kwargs)
            service = client.meta.service_model.service_name
            client.meta.events.register("before-parameter-build", functools.partial(log.record, service))
            client.meta.events.register("after-call", log.finish)
            client.meta.events.register("after-call-error", log.finish)
            return client

        monkeypatch.setattr(botocore.session.Session, "create_client", create_client)


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    """This module's moto server (overrides the shared one): the same serial server, with the
    WireLog in front of its WSGI app so every request is seen, from any process."""
    import logging

    from infra.local.moto_serial import SerialMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = SerialMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    # start() returns once the werkzeug server exists and before it has served a request.
    wsgi_server = server._server  # noqa: SLF001 — the one place moto exposes its WSGI server
    wsgi_server.app = _WIRE_LOGS[server.endpoint] = WireLog(wsgi_server.app)
    try:
        yield server.endpoint
    finally:
        server.stop()
        _WIRE_LOGS.pop(server.endpoint, None)


# endpoint -> its WireLog (`moto_server` must yield the endpoint string the shared fixtures expect)
_WIRE_LOGS: dict[str, WireLog] = {}


@pytest.fixture
def wire_log(moto_server: str) -> WireLog:
    return _WIRE_LOGS[moto_server]


@pytest.fixture
def counted_stack(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Stack, ClientLog]]:
    """The harness with a cold dispatch container whose every client is hooked."""
    from dispatch import parts as dependencies
    from dispatch.quota import client as quota_client
    from sandbox_common import aws
    from sandbox_runtime.runner import clear_cache

    clients = ClientLog()
    clients.install(monkeypatch)
    # A cold container: every client the dispatch process uses is built after the hook.
    aws.clear_clients()
    dependencies.reset()
    clear_cache()
    quota_client.lambda_client.cache_clear()
    yield stack, clients


def longest_chain(spans: list[tuple[float, float, int]]) -> int:
    """The most weight a chain of one-after-another spans carries (a span may follow another only
    if it starts after that one ended): the critical path of requests that waited on each other."""
    best: list[tuple[float, int]] = []  # (end, best chain ending with that span)
    for start, end, weight in sorted(spans, key=lambda s: s[1]):
        before = max((b for e, b in best if e <= start), default=0)
        best.append((end, before + weight))
    return max((b for _, b in best), default=0)


def critical_path_depth(dispatch_spans: list[Span], quota_spans: list[Span]) -> int:
    """Sequential AWS requests of one call: dispatch's own, where the quota invoke counts as one
    hop plus the chain of the quota Lambda's requests made inside it."""
    weighted = []
    for start, end, call in dispatch_spans:
        weight = 1
        if call.service == "lambda" and call.operation == "Invoke":
            weight += longest_chain([(s, e, 1) for s, e, _ in quota_spans if start <= s and e <= end])
        weighted.append((start, end, weight))
    return longest_chain(weighted)


def test_critical_path_depth_counts_parallel_requests_once() -> None:
    # Given a put, then two requests in parallel, then an invoke with two sequential quota calls
    put, get, txn = (
        Call(DISPATCH, "dynamodb", "PutItem"),
        Call(DISPATCH, "dynamodb", "GetItem"),
        Call(QUOTA, "dynamodb", "TransactWriteItems"),
    )
    invoke = Call(DISPATCH, "lambda", "Invoke")
    dispatch_spans = [(0.0, 1.0, put), (1.5, 3.0, get), (1.6, 2.5, put), (3.5, 9.0, invoke)]
    quota_spans = [(4.0, 5.0, txn), (6.0, 7.0, txn), (10.0, 11.0, txn)]
    # When the depth is measured / Then the parallel pair is one step and the invoke is 1 + 2
    assert critical_path_depth(dispatch_spans, quota_spans) == 1 + 1 + 3


def breakdown(calls: list[Call], logical_of: dict[str, str]) -> dict[str, int]:
    return dict(sorted(Counter(c.key(logical_of) for c in calls).items()))


def test_tables_in_reads_single_batch_and_transact_shapes() -> None:
    # Given the three request shapes that name tables
    single = {"TableName": "a", "Key": {}}
    batch = {"RequestItems": {"b": {}, "a": {}}}
    transact = {"TransactItems": [{"Update": {"TableName": "c"}}, {"ConditionCheck": {"TableName": "a"}}]}
    # When their tables are read / Then each is found, sorted and unique
    assert tables_in(single) == ("a",)
    assert tables_in(batch) == ("a", "b")
    assert tables_in(transact) == ("a", "c")


def test_describe_wire_request_json_query_and_origin() -> None:
    # Given a DynamoDB JSON request from a Lambda worker and an STS query request from dispatch
    ddb_body = json.dumps({"TableName": "t1"}).encode()
    ddb = {
        "PATH_INFO": "/",
        "CONTENT_LENGTH": str(len(ddb_body)),
        "wsgi.input": io.BytesIO(ddb_body),
        "HTTP_X_AMZ_TARGET": "DynamoDB_20120810.GetItem",
        "HTTP_AUTHORIZATION": (
            "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request, x"
        ),
        "HTTP_USER_AGENT": (
            "Boto3/1.44.5 md/Botocore#1.44.5 exec-env/AWS_Lambda_python3.13 cfg/retry-mode#standard"
        ),
    }
    sts_body = b"Action=AssumeRole&Version=2011-06-15&RoleArn=x"
    sts = {
        "PATH_INFO": "/",
        "CONTENT_LENGTH": str(len(sts_body)),
        "wsgi.input": io.BytesIO(sts_body),
        "HTTP_AUTHORIZATION": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/sts/aws4_request, x",
        "HTTP_USER_AGENT": "Boto3/1.44.5 md/Botocore#1.44.5",
    }
    # When they are described
    ddb_call, sts_call = describe_wire_request(ddb), describe_wire_request(sts)
    # Then service, operation, table and origin are right, and the body is still readable by moto
    assert ddb_call == Call(QUOTA, "dynamodb", "GetItem", ("t1",))
    assert sts_call == Call(DISPATCH, "sts", "AssumeRole")
    assert ddb["wsgi.input"].read() == ddb_body and sts["wsgi.input"].read() == sts_body
    assert describe_wire_request({"PATH_INFO": "/moto-api/reset", "wsgi.input": io.BytesIO()}) is None
    # And botocore's second attempt of the same request is not a second call
    retried = dict(ddb, HTTP_AMZ_SDK_REQUEST="attempt=2; max=3", **{"wsgi.input": io.BytesIO(ddb_body)})
    first = dict(ddb, HTTP_AMZ_SDK_REQUEST="attempt=1; max=3", **{"wsgi.input": io.BytesIO(ddb_body)})
    assert describe_wire_request(retried) is None
    assert describe_wire_request(first) == ddb_call


def test_aws_calls_per_execute_code(counted_stack: tuple[Stack, ClientLog], wire_log: WireLog) -> None:
    stack, clients = counted_stack
    wire = wire_log
    logical_of = {physical: logical for logical, physical in stack.resources.tables.items()}
    phases: dict[str, dict[str, int]] = {}
    wire_phases: dict[str, list[Call]] = {}
    client_phases: dict[str, list[Call]] = {}

    depths: dict[str, int] = {}

    def measured(phase: str, request: dict[str, Any]) -> dict[str, Any]:
        c0, w0 = len(clients.calls), len(wire.calls)
        s0, ws0 = len(clients.spans), len(wire.spans)
        result = stack.dispatch(request)
        depths[phase] = critical_path_depth(
            clients.spans[s0:], [s for s in wire.spans[ws0:] if s[2].origin == QUOTA]
        )
        client_calls, wire_calls = clients.calls[c0:], wire.calls[w0:]
        client_phases[phase], wire_phases[phase] = client_calls, wire_calls
        # dispatch's own calls from the hook; the quota Lambda's from the wire
        phases[phase] = breakdown(client_calls + [c for c in wire_calls if c.origin == QUOTA], logical_of)
        return result

    # Given a cold dispatch container and a cold quota Lambda, the only function this benchmark
    # invokes in the emulator (so every wire call carrying the Lambda exec-env is the quota
    # function's): the emulator's copy of dispatch is invoked only by the reaper's paused-calls
    # hook, which never runs here — dispatch is measured in-process
    assert set(stack.emulator.pools) == {
        stack.resources.functions[n.QUOTA_CHECK],
        stack.resources.functions[n.DISPATCH],
    }
    # When an agent runs a turn (begin, two calls), a second turn likewise, and a turn without begin
    started = time.perf_counter()
    assert measured("begin_turn_cold_container", event("begin_turn", turn_id="turn-a"))["ok"] is True
    assert (
        measured("first_call_cold_container", event(turn_id="turn-a", call_id="a1", code="x = 1"))["ok"]
        is True
    )
    assert measured("later_call", event(turn_id="turn-a", call_id="a2", code="x += 1"))["ok"] is True
    assert measured("begin_turn", event("begin_turn", turn_id="turn-b"))["ok"] is True
    assert measured("first_call_of_turn", event(turn_id="turn-b", call_id="b1", code="y = 1"))["ok"] is True
    assert measured("later_call_2", event(turn_id="turn-b", call_id="b2", code="print(y)"))["ok"] is True
    assert measured("end_turn", event("end_turn", turn_id="turn-b")) == {"ok": True, "stopped": True}
    assert measured("first_call_without_begin_turn", event(turn_id="turn-c", call_id="c1", code="z = 1"))[
        "ok"
    ]
    # And a turn whose first call claims a warm session the reaper started
    _fill_warm_pool(stack)
    assert measured("begin_turn_warm", event("begin_turn", turn_id="turn-w"))["ok"] is True
    assert (
        measured("warm_first_call", event(turn_id="turn-w", call_id="w1", code="w = 1"))["session_source"]
        == "warm"
    )
    elapsed = time.perf_counter() - started

    later, first = Counter(phases["later_call"]), Counter(phases["first_call_of_turn"])
    extra = first - later
    emit(
        "aws_calls_per_execute_code",
        target=(
            "later call: 0 SSM, 0 pre-flight reads, 1 InvokeCodeInterpreter, 1 TransactWriteItems, "
            "1 audit row (in the completion's transaction); first call adds only Start, 1 readiness invoke, "
            "the turn-state write"
        ),
        ratio=sum(first.values()) / sum(later.values()),
        later_call_total=sum(later.values()),
        first_call_total=sum(first.values()),
        first_call_extra=dict(sorted(extra.items())),
        later_call_reasons={k: v[1] for k, v in LATER_CALL_ALLOWED.items() if k in later},
        phases=phases,
        elapsed_s=round(elapsed, 2),
    )
    emit(
        "critical_path_depth",
        target="later call <= 5 sequential AWS requests (moonshot 4); first call <= later + 3",
        ratio=depths["first_call_of_turn"] / depths["later_call"],
        later_call=depths["later_call"],
        later_call_2=depths["later_call_2"],
        first_call_of_turn=depths["first_call_of_turn"],
        first_call_cold_container=depths["first_call_cold_container"],
    )

    # Then the cross-check holds: what dispatch's hook saw for moto == what moto saw from dispatch
    for phase in phases:
        hooked = Counter(c for c in client_phases[phase] if c.service not in NOT_ON_MOTO)
        on_wire = Counter(c for c in wire_phases[phase] if c.origin == DISPATCH)
        assert hooked == on_wire, (phase, hooked, on_wire)
        # and every quota-side call arrived inside a dispatch lambda:Invoke
        if any(c.origin == QUOTA for c in wire_phases[phase]):
            assert any(c.service == "lambda" and c.operation == "Invoke" for c in client_phases[phase]), phase

    # And a later call is exactly the justified set: no SSM, no pre-flight read, no STS,
    # one user invoke plus the artifact helper (nothing to read back), one counter transaction and
    # no counter read-back (no daily budget), one audit row inside the idempotency completion (in
    # both turns)
    assert phases["later_call"] == phases["later_call_2"], (phases["later_call"], phases["later_call_2"])
    for phase in ("later_call", "later_call_2"):
        calls = Counter(phases[phase])
        assert not [k for k in calls if ":ssm:" in k or ":sts:" in k], calls
        assert not [k for k in calls if f"[{n.TENANTS.logical}]" in k], calls  # pre-flight reads
        assert calls[f"{DISPATCH}:bedrock-agentcore:InvokeCodeInterpreter"] == 2
        assert calls[f"{DISPATCH}:bedrock-agentcore:StartCodeInterpreterSession"] == 0
        assert sum(v for k, v in calls.items() if ":TransactWriteItems[" in k) == 2  # counters, completion
        assert calls[COMPLETION] == 1
        assert (
            f"{DISPATCH}:dynamodb:PutItem[{n.INVOCATIONS.logical}]" not in calls
        )  # the row is in the completion
        unexpected = {k: v for k, v in calls.items() if v > LATER_CALL_ALLOWED.get(k, (0, ""))[0]}
        assert unexpected == {}, f"calls beyond the justified set: {unexpected}"
    # And the first call of a turn adds exactly Start, the readiness invoke and the turn state
    assert later <= first, "a first call must make every call a later one makes"
    assert dict(extra) == {k: v[0] for k, v in FIRST_CALL_EXTRA.items()}, dict(extra)
    # And a warm first call adds exactly ONE write to a later call: the claim, which binds the turn
    warm_extra = Counter(phases["warm_first_call"]) - later
    assert later <= Counter(phases["warm_first_call"])
    assert dict(warm_extra) == {k: v[0] for k, v in WARM_FIRST_CALL_EXTRA.items()}, dict(warm_extra)
    assert sum(warm_extra.values()) == 1
    # paid for by begin_turn, off the call: its pool read + its note on the turn, with an empty pool
    # (`begin_turn`) as with a warm session (`begin_turn_warm`) — the same requests either way
    begun, begun_warm = phases["begin_turn"], phases["begin_turn_warm"]
    assert begun == begun_warm, (begun, begun_warm)
    for key, (count, _) in BEGIN_TURN_POOL_NOTE.items():
        assert phases["begin_turn"].get(key) == count, (key, phases["begin_turn"])
    # And a cold first call reads the pool only when no begin_turn just found it empty
    pool_read = f"{DISPATCH}:dynamodb:Query[{n.SESSIONS.logical}]"
    assert pool_read not in phases["first_call_of_turn"], phases["first_call_of_turn"]
    unbegun = phases["first_call_without_begin_turn"]
    assert unbegun.get(pool_read) == 1, unbegun
    emit(
        "aws_calls_warm_first_call",
        target="warm first call adds only the claim write to a later call",
        ratio=sum(Counter(phases["warm_first_call"]).values()) / sum(later.values()),
        warm_first_call_extra=dict(sorted(warm_extra.items())),
        depth=depths["warm_first_call"],
        later_call_depth=depths["later_call"],
        begin_turn_warm=phases["begin_turn_warm"],
        begin_turn_warm_depth=depths["begin_turn_warm"],
    )
    # And its critical path stays within the bound, first call <= later + 3 (the claim is one
    # sequential step: later + 1 when the parallel requests overlap as sent; the depth is measured
    # from timings, so a loaded machine can split a parallel pair — the call count above is exact)
    assert depths["warm_first_call"] <= depths["later_call"] + 3, depths
    # And the depth measure saw every phase's requests: a later call waits on at least the quota
    # hop and its transaction (beside the idempotency claim), the user code, the artifact helper
    # and the record
    assert 5 <= depths["later_call"] <= sum(later.values()) + 2
    assert depths["first_call_of_turn"] > depths["later_call"]
    # And the independent requests went out together: the turn read and the
    # turn-guarded quota check beside the idempotency claim, the audit row inside the idempotency
    # completion, no quota read-back. A later call is [claim ‖ quota hop + transaction], user
    # code, artifact helper, record: 5.
    # The depth is measured from request timings: on a loaded machine one pair sent together can
    # finish apart (one request done before its partner left the thread pool) and read as two
    # steps. So: at least one of the two later calls shows the target, neither is more than one
    # split pair off it, and the cold first call after begin_turn meets "first <= later + 3" with
    # the same one split allowed (idle runs: 8; 9 when the quota hop ends before the slot
    # reservation leaves, docs/benchmarks.md "critical_path_depth").
    best_later = min(depths["later_call"], depths["later_call_2"])
    assert best_later <= 5, depths
    assert max(depths["later_call"], depths["later_call_2"]) <= 5 + 1, depths
    assert depths["first_call_of_turn"] <= best_later + 3 + 1, depths


def _fill_warm_pool(stack: Stack) -> None:
    """One warm session for acme's default-public environment, started by the reaper in-process
    with its own environment (its calls fall between the measured phases; the pool size is reset
    to 0 so nothing refills)."""
    from reaper import service
    from sandbox_common import aws, settings

    name = n.warm_sessions_parameter("local", "acme", "default-public")
    aws.client("ssm").put_parameter(Name=name, Value="1", Type="String", Overwrite=True)
    try:
        with pytest.MonkeyPatch.context() as reaper_env:
            harness.apply_reaper_env(stack, reaper_env.setenv)
            run = service.reaper().run()
        assert run["refill"]["started"] == 1
        assert all(result["ok"] for result in run.get("hooks", {}).values()), run
    finally:
        aws.client("ssm").put_parameter(Name=name, Value="0", Type="String", Overwrite=True)
        service.reset()
        settings.clear_caches()  # dispatch's own environment again


@pytest.fixture(scope="module")
def module_egress(
    moto_server: str, interpreter: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """The real egress proxy against this module's moto, attached to the local interpreter."""
    from infra.local.egress import TestRoutes
    from tests.support.egress_proxy import running_proxy

    with running_proxy(tmp_path_factory.mktemp("egress"), moto_server, TestRoutes("", "")) as running:
        interpreter.attach_egress(running.proxy)
        yield running


EGRESS_TABLE = n.EGRESS.logical
# An allowlist call's record transaction also carries its end reading as the session's `attributed`.
ALLOWLIST_COMPLETION = (
    f"{DISPATCH}:dynamodb:TransactWriteItems"
    f"[{'+'.join(sorted((EGRESS_TABLE, n.IDEMPOTENCY.logical, n.INVOCATIONS.logical)))}]"
)
# What an allowlist session's later call adds to the same call of a public session, exactly.
ALLOWLIST_LATER_EXTRA: dict[str, tuple[int, str]] = {
    f"{DISPATCH}:dynamodb:GetItem[{EGRESS_TABLE}]": (
        2,
        "the session's counters as the last row took them (sent ahead, chained on the turn read) "
        "and as the proxy has them now (beside the artifact helper); the end reading rides the "
        "record's transaction",
    ),
}
# ... its first call (a cold session): the credential, and the end reading
ALLOWLIST_FIRST_EXTRA: dict[str, tuple[int, str]] = {
    f"{DISPATCH}:dynamodb:PutItem[{EGRESS_TABLE}]": (
        1,
        "the session's proxy credential, between Start and readiness",
    ),
    f"{DISPATCH}:dynamodb:GetItem[{EGRESS_TABLE}]": (1, "the counters beside the artifact helper"),
}
# ... and its end_turn: the credential revoked before the stop
ALLOWLIST_END_EXTRA: dict[str, tuple[int, str]] = {
    f"{DISPATCH}:dynamodb:UpdateItem[{EGRESS_TABLE}]": (1, "the session's credential revoked"),
}


def test_aws_calls_per_allowlist_execute_code(
    counted_stack: tuple[Stack, ClientLog], wire_log: WireLog, module_egress: Any
) -> None:
    stack, clients = counted_stack
    logical_of = {physical: logical for logical, physical in stack.resources.tables.items()}
    phases: dict[str, Counter[str]] = {}
    depths: dict[str, int] = {}

    def measured(phase: str, request: dict[str, Any]) -> dict[str, Any]:
        c0, w0, s0, ws0 = len(clients.calls), len(wire_log.calls), len(clients.spans), len(wire_log.spans)
        result = stack.dispatch(request)
        depths[phase] = critical_path_depth(
            clients.spans[s0:], [s for s in wire_log.spans[ws0:] if s[2].origin == QUOTA]
        )
        calls = clients.calls[c0:] + [c for c in wire_log.calls[w0:] if c.origin == QUOTA]
        phases[phase] = Counter(breakdown(calls, logical_of))
        return result

    # Given a warm container (caps, pre-flight and both tenants' clients cached by a first turn of each)
    for template in ("analyst", "allowlisted"):
        warm_up = f"turn-warm-{template}"
        assert (
            stack.dispatch(event(turn_id=warm_up, call_id=f"w-{template}", template_id=template))["ok"]
            is True
        )
        stack.dispatch(event("end_turn", turn_id=warm_up))
    # and a public turn and an allowlisted one, side by side (the same container, the same steps)
    for kind, template in (("public", "analyst"), ("allowlist", "allowlisted")):
        turn = f"turn-{kind}"
        assert (
            measured(f"begin_{kind}", event("begin_turn", turn_id=turn, template_id=template))["ok"] is True
        )
        # When each runs a first call, two later calls and ends
        for step, code in (("first", "x = 1"), ("later", "x += 1"), ("later_2", "print(x)")):
            answer = measured(
                f"{step}_{kind}",
                event(turn_id=turn, call_id=f"{kind}-{step}", template_id=template, code=code),
            )
            assert answer["ok"] is True, answer
        assert measured(f"end_{kind}", event("end_turn", turn_id=turn)) == {"ok": True, "stopped": True}
    rows = {r["call_id"]: r for r in stack.audit_rows("acme")}
    assert rows["allowlist-later"]["egress"]["mode"] == "allowlist"
    assert rows["public-later"]["egress"]["mode"] == "public"

    def extra(phase: str) -> dict[str, int]:
        base, more = phases[f"{phase}_public"], Counter(phases[f"{phase}_allowlist"])
        if phase != "end":  # the one record transaction, with one more item
            assert more.pop(ALLOWLIST_COMPLETION) == base[COMPLETION] == 1, (phase, more, base)
            more[COMPLETION] = 1
        assert base <= more, (phase, base, more)  # an allowlist call makes every call a public one does
        return dict(more - base)

    emit(
        "aws_calls_allowlist",
        target="later allowlist call: + 2 GetItem of the egress table (the end reading rides the record), "
        "no deeper; first call + 1 (the credential)",
        ratio=sum(phases["later_allowlist"].values()) / sum(phases["later_public"].values()),
        later_extra=extra("later"),
        first_extra=extra("first"),
        end_turn_extra=extra("end"),
        depth_later_public=min(depths["later_public"], depths["later_2_public"]),
        depth_later_allowlist=min(depths["later_allowlist"], depths["later_2_allowlist"]),
        depth_first_public=depths["first_public"],
        depth_first_allowlist=depths["first_allowlist"],
    )
    # Then a later call adds exactly the two readings (the write rides the record), the first call
    # the credential and the end reading, end_turn the revocation
    assert extra("later") == extra("later_2") == {k: v[0] for k, v in ALLOWLIST_LATER_EXTRA.items()}
    assert extra("first") == {k: v[0] for k, v in ALLOWLIST_FIRST_EXTRA.items()}
    assert extra("end") == {k: v[0] for k, v in ALLOWLIST_END_EXTRA.items()}
    # And a later call is no deeper (the readings go beside requests already sent; the depth is
    # measured from timings, so one split pair is allowed as in the public benchmark above), and
    # a cold first call is one request deeper at most: the credential between Start and readiness
    best_public = min(depths["later_public"], depths["later_2_public"])
    assert min(depths["later_allowlist"], depths["later_2_allowlist"]) <= best_public + 1, depths
    # (a cold first call sends more pairs together, so load splits more of them: two allowed)
    assert depths["first_allowlist"] <= depths["first_public"] + 1 + 2, depths
