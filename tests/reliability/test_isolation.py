"""Tenant isolation (the runner's credentials, turns, audit rows, counters) and hostile ids through
the real stack."""

from __future__ import annotations

import json
import re
from typing import Any

from sandbox_common import aws
from sandbox_common import naming as n
from sandbox_common.runner_policy import RUNNER_ACTIONS

from tests.support.iam_eval import Request, decide, effective
from tests.support.runner import session_runner
from tests.support.stack import Stack, event

from .test_fuzz import RequestCounter


def _interpreters(stack: Stack, tenant: str) -> list[str]:
    return [i["id"] for i in stack.resources.interpreters if i["tenant_id"] == tenant]


def _interpreter_arns(stack: Stack, tenant: str) -> list[str]:
    return [i["arn"] for i in stack.resources.interpreters if i["tenant_id"] == tenant]


def test_isolation_runner_refuses_other_tenants_interpreter_before_any_aws_call(
    live: Stack, record: Any
) -> None:
    from sandbox_runtime.runner import CrossTenantInterpreter, credentials

    stack = live
    # Given acme's runner (acme's role and interpreter list), with every AWS request counted
    counter = RequestCounter()
    counter.arm(aws.client("sts").meta.events, credentials.tenant_session.events)
    runner = session_runner(
        allowed_interpreter_ids=_interpreters(stack, "acme"),
        allowed_interpreter_arns=_interpreter_arns(stack, "acme"),
        runner_role_arn=stack.resources.runner_role,
        call_timeout_seconds=10,
        stdout_cap_bytes=1024,
        stderr_cap_bytes=1024,
    )
    attempts = 0
    # When it is asked to start/run/stop on each of globex's interpreters
    for target in _interpreters(stack, "globex"):
        for call in (
            lambda t=target: runner.start_session(t),
            lambda t=target: runner.execute(t, "s-1", "print(1)"),
        ):
            attempts += 1
            try:
                call()
                raise AssertionError("cross-tenant call was not refused")
            except CrossTenantInterpreter:
                pass
        attempts += 1
        assert runner.stop_session(target, "s-1") is False
    record(
        "isolation",
        check="acme's runner on globex's interpreters (Start/Invoke/Stop)",
        figures=f"{attempts} attempts refused, {counter.count} AWS requests sent",
    )
    # Then every attempt was refused before any request (not even AssumeRole) left the process
    assert counter.count == 0


def test_isolation_effective_runner_policy_for_acme_denies_every_runner_action_on_globex(
    live: Stack, record: Any
) -> None:
    stack = live
    # Given the stage's one runner role as the local stack created it (moto's IAM)
    iam = aws.client("iam")
    role = stack.resources.runner_role.rsplit("/", 1)[1]
    role_policies = []
    for name in iam.list_role_policies(RoleName=role)["PolicyNames"]:
        doc = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
        role_policies.append(json.loads(doc) if isinstance(doc, str) else doc)
    # And the session policy acme's runner sends to STS when it really starts a session
    sent: list[str] = []
    aws.client("sts").meta.events.register(
        "provide-client-params.sts.AssumeRole", lambda params, **kw: sent.append(params["Policy"])
    )
    runner = session_runner(
        allowed_interpreter_ids=_interpreters(stack, "acme"),
        allowed_interpreter_arns=_interpreter_arns(stack, "acme"),
        runner_role_arn=stack.resources.runner_role,
        call_timeout_seconds=30,
        stdout_cap_bytes=1024,
        stderr_cap_bytes=1024,
    )
    acme_pub = n.interpreter_name("local", "acme", "default-public")
    session_id = runner.start_session(acme_pub)
    assert runner.stop_session(acme_pub, session_id) is True
    assert sent  # the runner assumed the role (once, then cached)
    session = json.loads(sent[-1])
    # When IAM evaluates acme's session (role policy ∩ session policy) on every interpreter
    globex, acme = _interpreter_arns(stack, "globex"), _interpreter_arns(stack, "acme")
    verdicts = {
        (action, arn): effective(role_policies, session, Request(action, arn))
        for action in RUNNER_ACTIONS
        for arn in globex + acme
    }
    denied = sum(verdicts[(a, arn)] != "allow" for a in RUNNER_ACTIONS for arn in globex)
    record(
        "isolation",
        check="acme's runner session (role policy ∩ session policy) on globex's interpreters",
        figures=f"{denied} of {len(RUNNER_ACTIONS) * len(globex)} runner actions denied",
    )
    # Then every runner action on globex's interpreters is denied, every one on acme's allowed
    assert globex and acme
    assert denied == len(RUNNER_ACTIONS) * len(globex)
    assert all(verdicts[(a, arn)] == "allow" for a in RUNNER_ACTIONS for arn in acme)
    # And the role's own policy alone would reach globex: the session policy is what confines it
    assert all(decide(role_policies, Request(a, arn)) == "allow" for a in RUNNER_ACTIONS for arn in globex)


def _counters_of(stack: Stack, tenant: str) -> list[dict[str, Any]]:
    return [
        i
        for items in stack.counter_items().values()
        for i in items
        if i[n.COUNTER_ATTR_TENANT]["S"] == tenant
    ]


def test_isolation_turn_audit_and_counters_stay_per_tenant(live: Stack, record: Any) -> None:
    from infra.sandboxctl.records_ops import audit_list

    from .test_fault_matrix import replay_target

    stack = live
    # Given acme's turn with one call
    mine = stack.dispatch(event(turn_id="iso-turn", call_id="iso-1", agent_id="iso-agent"))
    assert mine["ok"] is True
    acme_counters_before = _counters_of(stack, "acme")
    # When globex uses the same turn id (execute_code and end_turn)
    other = stack.dispatch(
        event(tenant_id="globex", turn_id="iso-turn", call_id="iso-2", agent_id="iso-agent")
    )
    ended = stack.dispatch(event("end_turn", tenant_id="globex", turn_id="iso-turn"))
    # Then globex works on a turn of its own: its own session (now stopped), its own rows and counts;
    # acme's session lives on, acme's counters and rows are untouched
    acme_rows = audit_list(replay_target(stack), tenant_id="acme")
    globex_rows = audit_list(replay_target(stack), tenant_id="globex")
    record(
        "isolation",
        check="globex using acme's turn id; audit queries by tenant; counters",
        figures=(
            f"execute_code -> ok={other.get('ok')} own"
            f" session={other.get('session_id') != mine['session_id']}, end_turn -> {ended}; audit rows acme"
            f" {len(acme_rows)}, globex {len(globex_rows)}"
        ),
    )
    assert other["ok"] is True
    assert other["session_id"] != mine["session_id"]
    assert ended == {"ok": True, "stopped": True}
    assert _counters_of(stack, "acme") == acme_counters_before
    assert [r["call_id"] for r in acme_rows if r["turn_id"] == "iso-turn"] == ["iso-1"]
    assert [r["call_id"] for r in globex_rows if r["turn_id"] == "iso-turn"] == ["iso-2"]
    assert all(r["tenant_id"] == "acme" for r in acme_rows)
    assert all(r["tenant_id"] == "globex" for r in globex_rows)
    assert stack.dispatch(event("end_turn", turn_id="iso-turn"))["stopped"] is True


# Valid ids made of every character REQUEST_ID_RE allows besides letters and digits.
EDGE_IDS = {
    "tenant_id": "acme",
    "agent_id": "a..:-_.b",
    "template_id": "analyst",
    "turn_id": "t:..:_-x",
    "call_id": "c.-:_..",
    "user_id": "u:..-_",
}
HOSTILE = [
    "../globex",
    "acme/*",
    "a'b",
    'a"b',
    "%s%n{0}",
    "acme\x00",
    "acme\n",
    "é",
    "a" * 10_240,
    "${jndi:x}",
]
_EXPRESSION_KEYS = (
    "KeyConditionExpression",
    "ConditionExpression",
    "UpdateExpression",
    "ProjectionExpression",
    "FilterExpression",
)


def test_isolation_ids_never_reach_paths_expressions_or_log_format(
    live: Stack, record: Any, capsys: Any
) -> None:
    from dispatch.quota import client as quota_client
    from sandbox_runtime.runner import credentials

    stack = live
    captured: list[tuple[str, bytes]] = []

    def capture(request: Any, event_name: str = "", **_: Any) -> None:
        captured.append((event_name, request.body if isinstance(request.body, bytes) else b""))

    for emitter in [aws.client(s).meta.events for s in ("dynamodb", "ssm", "sqs", "sts")] + [
        quota_client.lambda_client().meta.events,
        credentials.tenant_session.events,
    ]:
        emitter.register("before-send", capture)
    capsys.readouterr()
    # When valid-but-unusual ids run a whole turn, and hostile ids are sent in every id field
    ok = stack.dispatch(event(code="print(2)", **EDGE_IDS))
    stack.dispatch(event("end_turn", tenant_id="acme", turn_id=EDGE_IDS["turn_id"]))
    refused = 0
    for value in HOSTILE:
        for field in ("tenant_id", "agent_id", "template_id", "turn_id", "call_id", "user_id"):
            refused += stack.dispatch(event(**{field: value}))["error"] == "SandboxInvalidRequest"
    logs = capsys.readouterr().out.splitlines()
    # Then ids travel only as values: no SSM name with an extra path segment, no id in an expression
    names, expressions = 0, 0
    for name, body in captured:
        doc = json.loads(body) if body.startswith(b"{") else {}
        if ".ssm." in name and "Name" in doc:
            names += 1
            assert re.fullmatch(r"/thinkwork/local/sandbox/[a-z_]+(/[A-Za-z0-9_.:-]+)*", doc["Name"]), doc[
                "Name"
            ]
            assert ".." not in doc["Name"].split("/tenants/")[0]
        for key in _EXPRESSION_KEYS:
            for expr in _expressions(doc, key):
                expressions += 1
                for value in EDGE_IDS.values():
                    assert value not in expr, (key, expr)
    # And hostile ids sent no request at all, and every log line is still one JSON document
    hostile_requests = [b for _, b in captured if any(h.encode() in b for h in HOSTILE if len(h) > 3)]
    bad_lines = [line for line in logs if line.strip() and not _is_json(line)]
    record(
        "isolation",
        check="hostile ids vs SSM paths, DynamoDB expressions, log format",
        figures=(
            f"{len(HOSTILE) * 6} hostile-id requests refused {refused}; {len(captured)} AWS requests "
            f"captured ({names} SSM names, {expressions} expressions checked); {len(logs)} log lines, "
            f"{len(bad_lines)} not JSON"
        ),
    )
    assert ok["ok"] is True, ok
    assert refused == len(HOSTILE) * 6
    assert hostile_requests == []
    assert bad_lines == []
    assert names > 0 and expressions > 0


def _expressions(doc: Any, key: str) -> list[str]:
    found: list[str] = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == key and isinstance(v, str):
                found.append(v)
            else:
                found += _expressions(v, key)
    elif isinstance(doc, list):
        for v in doc:
            found += _expressions(v, key)
    return found


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False
