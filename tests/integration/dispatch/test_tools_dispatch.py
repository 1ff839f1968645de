"""Programmatic tool calling through dispatch on the shared real-parts stack:
the dispatch handler in-process, moto (turns, continuations, audit, counters), the quota Lambda in
the local Lambda emulator and real sessions of the local interpreter (a thread really parked on a
tool call between two Lambda invocations).

What a tool call must be: one model round trip for a whole loop, counted once, one audit row with
hashed per-call records, a continuation that is single-use and bound to its tenant, agent and turn,
and bounds (50 calls, 1 MiB results, the wait) enforced by dispatch.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from sandbox_common import aws, limits, messages
from sandbox_common import naming as n

from tests.support.stack import turn_token_for

from .conftest import Stack, event

TOOLS_TEMPLATE = "tools-analyst"
TOOLS = ["query_sales", "lookup"]


@pytest.fixture
def tools_stack(stack: Stack) -> Stack:
    """The stack with a template of acme whose code may call query_sales and lookup (what
    `sandboxctl template put acme tools-analyst --environment default-public --tools ...` writes)."""
    aws.client("dynamodb").put_item(
        TableName=stack.resources.tables[n.TENANTS.logical],
        Item={
            n.TENANTS.pk: {"S": "acme"},
            n.TENANTS.sort_key: {"S": n.TEMPLATE_ITEM_PREFIX + TOOLS_TEMPLATE},
            "environment": {"S": "default-public"},
            n.TEMPLATE_TOOLS_ATTRIBUTE: {"L": [{"S": t} for t in TOOLS]},
        },
    )
    return stack


def call(code: str, **over: Any) -> dict[str, Any]:
    return event(template_id=TOOLS_TEMPLATE, code=code, **over)


def resume(paused: dict[str, Any], **answer: Any) -> dict[str, Any]:
    """The resume an agent runtime sends for a paused call (turn-1 of agent-7 unless overridden)."""
    base = {k: answer.pop(k) for k in ("tenant_id", "agent_id", "turn_id", "turn_token") if k in answer}
    out = event("resume", continuation=paused["continuation"], **base, **answer)
    out.pop("template_id", None)
    return out


def daily_count(stack: Stack) -> int:
    items = stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical]
    return sum(int(i[n.COUNTER_ATTR_COUNT]["N"]) for i in items)


def drive(stack: Stack, answer: dict[str, Any], tool: Any, limit: int = 60) -> tuple[dict[str, Any], int]:
    """Answer every tool_call with `tool(name, input)` until the final result; (final, resumes)."""
    resumes = 0
    while answer.get("status") == n.STATUS_TOOL_CALL:
        assert resumes < limit, "the call never ended"
        tool_call = answer["tool_call"]
        answer = stack.dispatch(resume(answer, tool_result=tool(tool_call["name"], tool_call["input"])))
        resumes += 1
    return answer, resumes


FIFTY_AND_ONE = """\
from sandbox_tools import tools, ToolCallLimit
import os
total = 0
for i in range(50):
    with open('side_effects.txt', 'a') as f:   # a side effect before every call
        f.write('x')
    total += tools.query_sales(region_id=i)['amount']
try:
    tools.query_sales(region_id=50)
except ToolCallLimit as exc:
    print('51st call refused:', type(exc).__name__)
print('total', total, 'side effects', os.path.getsize('side_effects.txt'))
"""


def test_tools_fifty_calls_end_in_one_result_counted_once_with_one_row(tools_stack: Stack) -> None:
    stack = tools_stack
    # Given a turn of the tools template (begin_turn lists the tools in the execute_code tool)
    begun = stack.dispatch(event("begin_turn", template_id=TOOLS_TEMPLATE))
    assert "query_sales" in begun["sandbox"]["tool"]["description"]
    assert "lookup" in begun["sandbox"]["tool"]["description"]
    counted_before = daily_count(stack)

    # When one execute_code calls query_sales 50 times (and tries a 51st) and the agent answers each
    first = stack.dispatch(call(FIFTY_AND_ONE, call_id="c-50"))
    assert first["status"] == n.STATUS_TOOL_CALL, first
    assert first["tool_call"] == {
        "id": f"{first['invocation_id']}-1",
        "name": "query_sales",
        "input": {"region_id": 0},
    }
    final, resumes = drive(stack, first, lambda name, args: {"amount": 1000 + args["region_id"]})

    # Then 50 round trips to the agent's tool, one final result with tool_calls: 50, the 51st call
    # raised ToolCallLimit in the code, and every side effect happened exactly once (no replay)
    assert resumes == 50
    assert final["ok"] is True, final
    assert final["tool_calls"] == 50
    expected_total = sum(1000 + i for i in range(50))
    assert final["stdout"] == f"51st call refused: ToolCallLimit\ntotal {expected_total} side effects 50\n"
    assert final["invocation_id"] == first["invocation_id"] and final["session_id"] == first["session_id"]
    # and the call was counted once
    assert daily_count(stack) == counted_before + 1
    # and it has one audit row, with the count and one hashed record per call (no input, no result)
    rows = [r for r in stack.audit_rows("acme") if r["call_id"] == "c-50"]
    assert len(rows) == 1
    row = rows[0]
    assert row["invocation_id"] == first["invocation_id"] and row["exit_status"] == "ok"
    assert row["tool_calls"] == 50
    records = row[n.AUDIT_TOOL_CALL_RECORDS]
    assert len(records) == 50
    assert {tuple(sorted(r)) for r in records} == {("duration_ms", "input_sha256", "name", "ok")}
    assert all(
        r["name"] == "query_sales" and r["ok"] is True and len(r["input_sha256"]) == 64 for r in records
    )
    # and the row's code hash is the original code's (the continuation never kept the code)
    from sandbox_common.audit import code_hash

    assert row["executed_code_hash"] == code_hash(FIFTY_AND_ONE)


def test_tools_unlisted_tool_raises_tool_not_allowed_without_a_round_trip(tools_stack: Stack) -> None:
    # Given code that calls a tool outside the template's allowlist
    code = (
        "from sandbox_tools import tools, ToolNotAllowed\n"
        "try:\n    tools.delete_everything(really=True)\nexcept ToolNotAllowed as exc:\n"
        "    print('refused:', type(exc).__name__)\n"
    )
    # When it runs
    answer = tools_stack.dispatch(call(code, call_id="c-unlisted"))
    # Then the code saw ToolNotAllowed and the call ended at once: no tool_call round trip
    assert answer.get("status") != n.STATUS_TOOL_CALL
    assert answer["ok"] is True, answer
    assert answer["stdout"] == "refused: ToolNotAllowed\n"
    assert answer["tool_calls"] == 0


def test_tools_template_without_tools_keeps_plain_execution(stack: Stack) -> None:
    # Given the plain template (no tools)
    begun = stack.dispatch(event("begin_turn"))
    assert "sandbox_tools" not in begun["sandbox"]["tool"]["description"]
    # When its code calls a tool
    code = (
        "from sandbox_tools import tools, ToolNotAllowed\n"
        "try:\n    tools.query_sales(r=1)\nexcept ToolNotAllowed:\n    print('not allowed')\n"
    )
    answer = stack.dispatch(event(code=code))
    # Then the tool is not allowed and the answer has no tool fields
    assert answer["stdout"] == "not allowed\n"
    assert "tool_calls" not in answer


def _listed(begun: dict[str, Any]) -> list[str]:
    """The template tools execute_code's description lists (after its `Tools:`)."""
    description = begun["sandbox"]["tool"]["description"]
    return description.split("Tools: ", 1)[1].rstrip(".").split(", ") if "Tools: " in description else []


def test_begin_turn_lists_only_the_template_tools_the_caller_can_answer(tools_stack: Stack) -> None:
    # Given the tools template (query_sales, lookup) / When begin_turn names no client tools, the
    # one the client has, none, and a tool the template does not allow
    absent = tools_stack.dispatch(event("begin_turn", template_id=TOOLS_TEMPLATE, turn_id="ct-1"))
    one = tools_stack.dispatch(
        event("begin_turn", template_id=TOOLS_TEMPLATE, turn_id="ct-2", client_tools=["query_sales", "other"])
    )
    none = tools_stack.dispatch(
        event("begin_turn", template_id=TOOLS_TEMPLATE, turn_id="ct-3", client_tools=[])
    )
    # Then absent lists every template tool (a caller of before the field), else only those it can answer
    assert _listed(absent) == ["lookup", "query_sales"]
    assert _listed(one) == ["query_sales"]
    assert _listed(none) == [] and "sandbox_tools" not in none["sandbox"]["tool"]["description"]
    # And the code may still call every template tool (the allowlist is the template's)
    assert all(b["ok"] is True and b["sandbox"]["status"] == "ready" for b in (absent, one, none))


@pytest.mark.parametrize(
    "client_tools",
    [["bad name"], "query_sales", [7], ["t"] * 129, None],
    ids=["bad-name", "not-a-list", "not-a-string", "too-many", "null"],
)
def test_begin_turn_refuses_malformed_client_tools_and_creates_no_turn(
    tools_stack: Stack, client_tools: Any
) -> None:
    # Given a begin_turn whose client_tools is malformed (null is the field left out: accepted)
    request = event("begin_turn", template_id=TOOLS_TEMPLATE, turn_id="ct-bad", client_tools=client_tools)
    # When dispatch answers it
    answer = tools_stack.dispatch(request)
    # Then a named refusal, and no turn was created (the turn id is still free for another token)
    if client_tools is None:
        assert answer["ok"] is True
        return
    assert (answer["ok"], answer["error"]) == (False, "SandboxInvalidRequest"), answer
    item = aws.client("dynamodb").get_item(
        TableName=tools_stack.resources.tables[n.TURNS.logical],
        Key={"tenant_id": {"S": "acme"}, "turn_id": {"S": "ct-bad"}},
    )
    assert "Item" not in item


def test_begin_turn_serves_every_tool_of_the_surface_with_the_stages_limits(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dispatch import parts
    from sandbox_common import settings
    from sandbox_common.tool_spec import TOOL_NAMES, SurfaceLimits, tool_definitions

    # Given a stage whose per-call deadline is 45 s and whose stdout cap is 64 KiB
    monkeypatch.setenv(n.ENV_CALL_TIMEOUT, "45")
    monkeypatch.setenv(n.ENV_STDOUT_CAP, str(64 * 1024))
    settings.clear_caches()
    parts.reset()
    # When a turn begins
    sandbox = stack.dispatch(event("begin_turn", turn_id="limits-1"))["sandbox"]
    # Then every tool is served, execute_code first and also as `tool` (Part I callers)
    assert [t["name"] for t in sandbox["tools"]] == list(TOOL_NAMES)
    assert sandbox["tool"] == sandbox["tools"][0]
    # And the descriptions carry the stage's figures: the tools built from them, exactly
    assert sandbox["tools"] == tool_definitions(
        limits=SurfaceLimits(call_timeout_seconds=45, stdout_cap_bytes=64 * 1024, stderr_cap_bytes=32 * 1024)
    )
    assert "within 45 s" in sandbox["tool"]["description"]
    assert "stdout 64 KiB, stderr 32 KiB" in sandbox["tool"]["description"]


def test_tools_result_over_one_mib_reaches_the_code_as_tool_error(tools_stack: Stack) -> None:
    stack = tools_stack
    # Given a call paused on a tool
    code = (
        "from sandbox_tools import tools, ToolError\n"
        "try:\n    tools.lookup(key='big')\nexcept ToolError as exc:\n    print('ToolError:', exc)\n"
        "print('small', tools.lookup(key='small'))\n"
    )
    paused = stack.dispatch(call(code, call_id="c-big"))
    assert paused["status"] == n.STATUS_TOOL_CALL
    # When the agent answers with a result of 1 MiB + 1 byte serialized, then a small one
    big = "a" * (limits.TOOLS_MAX_RESULT_BYTES + 1 - 2)  # + the two quotes of its JSON string
    assert len(json.dumps(big)) == limits.TOOLS_MAX_RESULT_BYTES + 1
    second = stack.dispatch(resume(paused, tool_result=big))
    assert second["status"] == n.STATUS_TOOL_CALL, second
    final = stack.dispatch(resume(second, tool_result="ok"))
    # Then the code got a ToolError naming the bound for the big one, and the small one normally
    assert final["ok"] is True, final
    assert final["stdout"] == (
        f"ToolError: tool result is {limits.TOOLS_MAX_RESULT_BYTES + 1} bytes serialized, over the "
        f"{limits.TOOLS_MAX_RESULT_BYTES}-byte limit\nsmall ok\n"
    )
    assert final["tool_calls"] == 2
    row = next(r for r in stack.audit_rows("acme") if r["call_id"] == "c-big")
    assert [r["ok"] for r in row[n.AUDIT_TOOL_CALL_RECORDS]] == [False, True]


def test_tools_tool_error_from_the_agent_reaches_the_code(tools_stack: Stack) -> None:
    # Given a call paused on a tool
    code = (
        "from sandbox_tools import tools, ToolError\n"
        "try:\n    tools.lookup(key='k')\nexcept ToolError as exc:\n    print('failed:', exc)\n"
    )
    paused = tools_stack.dispatch(call(code, call_id="c-err"))
    # When the agent's tool failed
    final = tools_stack.dispatch(resume(paused, tool_error="no such key"))
    # Then the code saw a ToolError with the tool's message
    assert final["stdout"] == "failed: no such key\n"
    assert final["tool_calls"] == 1


def _slot_sessions(stack: Stack) -> list[str | None]:
    """Sessions holding a slot in the session ledger."""
    from sandbox_common.sessions.ledger import SessionLedger

    ledger = SessionLedger(table_name=stack.resources.tables[n.SESSIONS.logical], ddb=aws.client("dynamodb"))
    return [slot.session_id for slot in ledger.slots()]


def _tool_wait_bound(monkeypatch: pytest.MonkeyPatch, seconds: int) -> None:
    """Set the stage's tool_wait_seconds for the dispatch built next."""
    from dispatch import parts
    from sandbox_common import settings

    monkeypatch.setenv(n.ENV_TOOL_WAIT_SECONDS, str(seconds))
    settings.clear_caches()
    parts.reset()


@pytest.fixture
def short_wait(tools_stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    """A 1-second tool wait bound (the stage's tool_wait_seconds)."""
    _tool_wait_bound(monkeypatch, 1)
    return tools_stack


@pytest.fixture
def early_sweep_wait(tools_stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    """A 5-second tool wait bound: a sweep right after the pause falls inside it, also on a
    loaded machine."""
    _tool_wait_bound(monkeypatch, 5)
    return tools_stack


def test_tools_result_after_the_wait_bound_ends_the_call_as_timeout_with_session_stopped(
    short_wait: Stack,
) -> None:
    stack = short_wait
    # Given a call that printed something, then paused on a tool
    paused = stack.dispatch(
        call(
            "from sandbox_tools import tools\nprint('before')\ntools.lookup(key='k')\nprint('after')\n",
            call_id="c-wait",
        )
    )
    assert paused["status"] == n.STATUS_TOOL_CALL
    assert paused["session_id"] in stack.live_sessions()
    assert paused["session_id"] in _slot_sessions(stack)
    # When the result arrives after the wait bound
    time.sleep(1.5)
    final = stack.dispatch(resume(paused, tool_result=1))
    # Then the call ends SandboxTimeout with the output from before the pause, nothing after it ran,
    # the session is stopped, and the call has its one row
    assert (final["ok"], final["error"], final["exit_status"]) == (False, "SandboxTimeout", "timeout"), final
    assert final["stdout"] == "before\n"
    assert paused["session_id"] not in stack.live_sessions()
    assert paused["session_id"] not in _slot_sessions(stack)  # and its slot freed
    rows = [r for r in stack.audit_rows("acme") if r["call_id"] == "c-wait"]
    assert [(r["exit_status"], r["failure_reason"]) for r in rows] == [("timeout", "tool_wait_expired:1s")]
    # and the turn's next call starts a fresh session and runs
    again = stack.dispatch(event(call_id="c-next", code="print('fresh')"))
    assert again["stdout"] == "fresh\n" and again["session_id"] != paused["session_id"]


SIDE_EFFECT = (
    "from sandbox_tools import tools\n"
    "with open('resumed.txt', 'a') as f:\n    f.write('before ')\n"
    "v = tools.lookup(key='k')\n"
    "with open('resumed.txt', 'a') as f:\n    f.write('after')\n"
    "print(open('resumed.txt').read(), v)\n"
)


@pytest.mark.parametrize("who", ["other-turn", "other-agent", "other-tenant", "wrong-token"])
def test_tools_foreign_continuation_is_refused_and_nothing_runs(
    tools_stack: Stack, who: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = tools_stack
    # Given a call of acme/agent-7/turn-1 paused on a tool, and another turn of the same agent
    paused = stack.dispatch(call(SIDE_EFFECT, call_id="c-foreign"))
    assert paused["status"] == n.STATUS_TOOL_CALL
    assert stack.dispatch(event(turn_id="turn-2", call_id="c-t2", code="x = 2"))["ok"] is True
    stack.dispatch(event(tenant_id="globex", turn_id="turn-g", call_id="c-g", code="x = 3"))
    counters, rows = stack.counter_items(), len(stack.audit_rows())
    thief = {
        "other-turn": {"turn_id": "turn-2"},
        "other-agent": {"agent_id": "agent-8"},
        "other-tenant": {"tenant_id": "globex", "turn_id": "turn-g"},
        "wrong-token": {"turn_token": turn_token_for("acme", "turn-2")},
    }[who]
    capsys.readouterr()
    # When someone else sends its continuation
    refused = stack.dispatch(resume(paused, tool_result="stolen", **thief))
    # Then it is refused as invalid, nothing is counted or audited
    assert (refused["ok"], refused["error"]) == (False, "SandboxInvalidRequest"), refused
    assert stack.counter_items() == counters and len(stack.audit_rows()) == rows
    # and nothing ran: the rightful resume still finds the code where it paused, exactly once
    final = stack.dispatch(resume(paused, tool_result="mine"))
    assert final["ok"] is True, final
    assert final["stdout"] == "before after mine\n"


def test_tools_continuation_reused_replays_the_final_answer_and_nothing_runs_again(
    tools_stack: Stack,
) -> None:
    stack = tools_stack
    # Given a call resumed to its end
    paused = stack.dispatch(call(SIDE_EFFECT, call_id="c-reuse"))
    final = stack.dispatch(resume(paused, tool_result=1))
    assert final["stdout"] == "before after 1\n"
    rows, counters = len(stack.audit_rows()), stack.counter_items()
    # When its continuation is sent again (a retried resume), and a made-up one
    again = stack.dispatch(resume(paused, tool_result=2))
    made_up = stack.dispatch(resume({"continuation": "A" * 43}, tool_result=2))
    # Then the retry gets the call's final answer, the made-up one is refused; nothing counted,
    # audited or run
    assert again == final
    assert (made_up["error"], made_up["error_message"]) == (
        "SandboxInvalidRequest",
        messages.CONTINUATION_INVALID,
    )
    assert len(stack.audit_rows()) == rows and stack.counter_items() == counters
    check = stack.dispatch(event(call_id="c-check", code="print(open('resumed.txt').read())"))
    assert check["stdout"] == "before after\n"


SECRET_INPUT = "customer-4711-private-input"
SECRET_RESULT = "quarterly-figures-private-result"
GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def test_tools_inputs_and_results_never_reach_logs_or_audit_and_tokens_are_redacted(
    tools_stack: Stack, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    stack = tools_stack
    # Given a call that sends a private input, and prints only the size of the tool's private
    # figures and the token the result also holds (what the code prints is its output: logged,
    # redacted, like any output)
    code = (
        f"from sandbox_tools import tools\nr = tools.lookup(key={SECRET_INPUT!r})\n"
        "print('got', len(r['figures']), r['token'])\n"
    )
    paused = stack.dispatch(call(code, call_id="c-private"))
    assert paused["tool_call"]["input"] == {"key": SECRET_INPUT}  # only the agent sees it
    final = stack.dispatch(resume(paused, tool_result={"figures": SECRET_RESULT, "token": GITHUB_TOKEN}))
    # Then the token printed by the code is redacted in stdout like any other
    assert final["ok"] is True, final
    assert final["stdout"].startswith(f"got {len(SECRET_RESULT)} ")
    assert GITHUB_TOKEN not in final["stdout"] and "redacted" in final["stdout"].lower()
    # and the tool's input and result appear in no log line and no audit attribute
    records = json.dumps([{**vars(r), "msg": r.getMessage()} for r in caplog.records], default=str)
    streams = capfd.readouterr()
    row = next(r for r in stack.audit_rows("acme") if r["call_id"] == "c-private")
    for secret in (SECRET_INPUT, SECRET_RESULT, GITHUB_TOKEN):
        assert secret not in records
        assert secret not in streams.out and secret not in streams.err
        assert secret not in json.dumps(row, default=str)
    # (the logs did carry this call, its output and its hashed record: the check looked at the right place)
    assert final["invocation_id"] in records and "sandbox_output" in records
    assert row[n.AUDIT_TOOL_CALL_RECORDS][0]["input_sha256"] in records


def test_tools_end_turn_ends_a_paused_call_as_timeout_with_its_row(tools_stack: Stack) -> None:
    stack = tools_stack
    # Given a call paused on a tool
    paused = stack.dispatch(
        call("from sandbox_tools import tools\nprint('started')\ntools.lookup(key='k')\n", call_id="c-ended")
    )
    assert not [r for r in stack.audit_rows("acme") if r["call_id"] == "c-ended"]  # paused: no row yet
    # When the turn ends
    ended = stack.dispatch(event("end_turn"))
    # Then the session is stopped and the paused call has its one row, as a timeout
    assert ended == {"ok": True, "stopped": True}
    assert paused["session_id"] not in stack.live_sessions()
    rows = [r for r in stack.audit_rows("acme") if r["call_id"] == "c-ended"]
    assert len(rows) == 1
    assert (rows[0]["exit_status"], rows[0]["failure_reason"]) == ("timeout", n.REASON_TOOL_TURN_ENDED)
    assert rows[0]["tool_calls"] == 1 and rows[0]["stdout_bytes"] == len("started\n")
    # and its continuation is spent
    late = stack.dispatch(resume(paused, tool_result=1))
    assert late["error"] == "SandboxInvalidRequest"


def test_tools_retried_execute_code_of_a_paused_call_is_not_counted_again(tools_stack: Stack) -> None:
    stack = tools_stack
    # Given a paused call
    paused = stack.dispatch(
        call("from sandbox_tools import tools\nprint(tools.lookup(key='k'))\n", call_id="c-retry")
    )
    counted = daily_count(stack)
    # When the agent retries the same execute_code (lost answer)
    retried = stack.dispatch(
        call("from sandbox_tools import tools\nprint(tools.lookup(key='k'))\n", call_id="c-retry")
    )
    # Then it gets the same pause back, and nothing is counted or run again
    assert retried["continuation"] == paused["continuation"] and retried["tool_call"] == paused["tool_call"]
    assert daily_count(stack) == counted
    final = stack.dispatch(resume(retried, tool_result="v"))
    assert final["stdout"] == "v\n" and final["tool_calls"] == 1


def test_tools_agent_client_and_strands_tool_run_the_loop_through_dispatch(tools_stack: Stack) -> None:
    import boto3
    from sandbox_client.turn import SandboxTurn

    from tests.support.http import http_endpoint

    stack = tools_stack
    seen: list[str] = []

    def lambda_api(path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        event_ = json.loads(body)
        seen.append(event_["action"])
        return 200, {}, json.dumps(stack.dispatch(event_)).encode()

    def query_sales(region: str) -> dict[str, Any]:  # the agent's own tool, run by the client
        return {"amount": {"EU": 120, "US": 200}[region]}

    code = (
        "from sandbox_tools import tools\n"
        "print(sum(tools.query_sales(region=r)['amount'] for r in ('EU', 'US')))\n"
    )
    with http_endpoint(lambda_api) as endpoint:
        client = boto3.client("lambda", endpoint_url=endpoint)
        # Given an agent client turn of the tools template, with the agent's tool
        with SandboxTurn(
            "dispatch",
            tenant_id="acme",
            agent_id="agent-7",
            template_id=TOOLS_TEMPLATE,
            lambda_client=client,
            tools={"query_sales": query_sales},
        ) as turn:
            # Then begin_turn's tool lists the tools, and so does the Strands tool's spec
            assert turn.tool is not None and "query_sales" in turn.tool["description"]
            strands = turn.strands_tool()
            assert "query_sales" in strands.tool_spec["description"]
            # When the code calls the tool twice, through execute_code and through the Strands tool
            direct = turn.execute_code(code)
            via_strands = strands._call({"toolUseId": "t1", "input": {"code": code}})
    # Then each returns only the final result, after two resumes answered by the client
    assert (direct.stdout, direct.tool_calls) == ("320\n", 2)
    assert via_strands["status"] == "success"
    assert json.loads(via_strands["content"][0]["text"])["stdout"] == "320\n"
    assert seen == [
        "begin_turn",
        "execute_code",
        "resume",
        "resume",
        "execute_code",
        "resume",
        "resume",
        "end_turn",
    ]


def test_tools_continuation_store_down_at_resume_fails_closed_without_a_row(
    tools_stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = tools_stack
    # Given a paused call, then the continuations table is gone
    paused = stack.dispatch(
        call("from sandbox_tools import tools\nprint(tools.lookup(key='k'))\n", call_id="c-down")
    )
    assert paused["status"] == n.STATUS_TOOL_CALL
    aws.client("dynamodb").delete_table(TableName=stack.resources.tables[n.CONTINUATIONS.logical])
    capsys.readouterr()
    # When the agent resumes
    answer = stack.dispatch(resume(paused, tool_result=1))
    # Then it is refused as a sandbox error, alarmed as a dispatch internal error, and nothing is
    # audited (the call did not end)
    assert (answer["ok"], answer["error"]) == (False, "SandboxError"), answer
    assert answer["error_message"] == messages.CONTINUATION_STORE_UNAVAILABLE
    assert "failure_reason" not in answer
    assert n.METRIC_DISPATCH_INTERNAL_ERRORS in capsys.readouterr().out
    assert not [r for r in stack.audit_rows("acme") if r["call_id"] == "c-down"]


def test_tools_failure_after_the_claim_still_ends_the_call_with_its_row(tools_stack: Stack) -> None:
    from dispatch import parts

    stack = tools_stack
    # Given a paused call, then the tenant's substrate parameter is unreadable (a fresh container)
    paused = stack.dispatch(
        call("from sandbox_tools import tools\nprint(tools.lookup(key='k'))\n", call_id="c-lost")
    )
    assert paused["status"] == n.STATUS_TOOL_CALL
    aws.client("ssm").delete_parameter(Name=n.tenant_substrate_parameter("local", "acme"))
    parts.reset()
    # When the agent resumes
    answer = stack.dispatch(resume(paused, tool_result=1))
    # Then the claimed call ends SandboxError with its one row (never row-less), and is spent
    assert (answer["ok"], answer["error"]) == (False, "SandboxError"), answer
    rows = [r for r in stack.audit_rows("acme") if r["call_id"] == "c-lost"]
    assert len(rows) == 1
    assert rows[0]["failure_reason"].startswith("preflight_unavailable:")
    assert rows[0]["invocation_id"] == paused["invocation_id"]
    assert stack.dispatch(resume(paused, tool_result=1)) == answer  # spent: a retry replays its end


# --- the paused-calls sweep: a call nobody resumes or ends ends on its own ----------
PAUSE = "from sandbox_tools import tools\nprint('before')\ntools.lookup(key='k')\nprint('after')\n"


def _sweep(stack: Stack) -> dict[str, Any]:
    return stack.dispatch({"action": n.Action.SWEEP_PAUSED_CALLS})


def test_tools_sweep_ends_a_paused_call_past_its_wait_bound_once_with_session_stopped(
    early_sweep_wait: Stack,
) -> None:
    stack = early_sweep_wait
    # Given a call paused on a tool, inside its 5 s wait bound
    paused = stack.dispatch(call(PAUSE, call_id="c-swept"))
    assert paused["status"] == n.STATUS_TOOL_CALL
    # When the sweep runs before the bound passed
    early = _sweep(stack)
    # Then the call is untouched: still paused, its session live, no row
    assert early == {"ok": True}  # any caller may send it: the answer carries no counts
    assert paused["session_id"] in stack.live_sessions()
    assert not [r for r in stack.audit_rows("acme") if r["call_id"] == "c-swept"]
    # When nobody resumes it and the sweep runs after the bound
    time.sleep(5.5)
    swept = _sweep(stack)
    # Then it ended as SandboxTimeout with one row, its session stopped and its slot freed
    assert swept == {"ok": True}
    rows = [r for r in stack.audit_rows("acme") if r["call_id"] == "c-swept"]
    assert [(r["exit_status"], r["failure_reason"], r["tool_calls"]) for r in rows] == [
        ("timeout", "tool_wait_expired:5s", 1)
    ]
    assert rows[0]["invocation_id"] == paused["invocation_id"]
    assert paused["session_id"] not in stack.live_sessions()
    assert paused["session_id"] not in _slot_sessions(stack)
    # And a late resume (answered the call's end), and a second sweep, change nothing
    late = stack.dispatch(resume(paused, tool_result=1))
    assert (late["error"], late["invocation_id"]) == ("SandboxTimeout", paused["invocation_id"])
    assert _sweep(stack) == {"ok": True}
    assert len([r for r in stack.audit_rows("acme") if r["call_id"] == "c-swept"]) == 1


def test_tools_sweep_racing_a_late_resume_ends_the_call_once(short_wait: Stack) -> None:
    from concurrent.futures import ThreadPoolExecutor

    stack = short_wait
    # Given a call paused past its wait bound
    paused = stack.dispatch(call(PAUSE, call_id="c-race"))
    assert paused["status"] == n.STATUS_TOOL_CALL
    time.sleep(1.5)
    # When a late resume and the sweep arrive together
    with ThreadPoolExecutor(max_workers=2) as pool:
        late = pool.submit(stack.dispatch, resume(paused, tool_result=1))
        swept = pool.submit(_sweep, stack)
        answers = (late.result(), swept.result())
    # Then the call ended once: one row (a timeout), and the resume either ended it (its answer is
    # the timeout) or found its continuation spent by the sweep (an invalid continuation)
    assert answers[1] == {"ok": True}
    assert answers[0].get("exit_status") == "timeout" or answers[0]["error"] == "SandboxInvalidRequest", (
        answers
    )
    rows = [r for r in stack.audit_rows("acme") if r["call_id"] == "c-race"]
    assert [r["exit_status"] for r in rows] == ["timeout"]


def test_tools_reaper_hook_asks_dispatch_to_sweep_paused_calls(
    short_wait: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reaper's paused_sweep hook invokes the (emulated) dispatch Lambda with the internal action."""
    from reaper import service
    from reaper.handler import handler as reaper_handler
    from sandbox_common import settings

    from infra.cdk.config import build_config
    from infra.cdk.function_env import function_environment
    from tests.conftest import LambdaContext

    stack = short_wait
    # Given a paused call past its bound, and this process holding the reaper's environment
    paused = stack.dispatch(call(PAUSE, call_id="c-reaped"))
    assert paused["status"] == n.STATUS_TOOL_CALL
    time.sleep(1.5)
    for key, value in function_environment(
        build_config("local"), n.REAPER, tables=stack.resources.tables
    ).items():
        monkeypatch.setenv(key, value)
    settings.clear_caches()
    service.reset()
    try:
        # When the scheduled reaper runs
        out = reaper_handler({"source": "aws.events", "detail-type": "Scheduled Event"}, LambdaContext())
    finally:
        service.reset()
    # Then its paused-calls hook ran (dispatch answered ok) and dispatch ended the call: one row
    assert out["hooks"][n.REAPER_HOOK_PAUSED] == {"ok": True}, out["hooks"]
    rows = [r for r in stack.audit_rows("acme") if r["call_id"] == "c-reaped"]
    assert [r["exit_status"] for r in rows] == ["timeout"]


def test_tools_retry_of_a_finished_call_id_returns_its_final_result(tools_stack: Stack) -> None:
    stack = tools_stack
    # Given a tool-calling call resumed to its end
    paused = stack.dispatch(call(SIDE_EFFECT, call_id="c-finished"))
    final = stack.dispatch(resume(paused, tool_result=1))
    assert final["stdout"] == "before after 1\n"
    rows, counters = len(stack.audit_rows()), stack.counter_items()
    # When the execute_code is retried with the same call_id
    retried = stack.dispatch(call(SIDE_EFFECT, call_id="c-finished"))
    # Then it gets the final result (not the old pause with its spent continuation); nothing
    # counted, audited or run again
    assert retried == final
    assert len(stack.audit_rows()) == rows and stack.counter_items() == counters
