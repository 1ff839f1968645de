"""The agent client's tool loop and dispatch's tool-call steps, end to end on real parts: the
client over a real Lambda-Invoke HTTP endpoint, `dispatch.tool_calls` with the continuation store
on moto's DynamoDB and the ToolsRunner on the real local interpreter.

The endpoint is a thin router (execute_code -> start_call, resume -> claim + resume_call), the
same calls dispatch's handler makes; the final answer is the runner result plus `tool_calls`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from dispatch.tools.calls import Owner, claim, resume_call, start_call
from dispatch.tools.store import Answered, ContinuationStore
from sandbox_client.turn import SandboxTurn
from sandbox_common import aws
from sandbox_common import naming as n
from sandbox_common.errors import SandboxFailure
from sandbox_common.models import parse_resume_event

from infra.local.resources import create_table_request
from tests.support.http import http_endpoint
from tests.support.tools_session import ToolsSession

STAGE = "test"


@pytest.fixture
def store(moto_endpoint: str) -> ContinuationStore:
    ddb = aws.client("dynamodb")
    ddb.create_table(**create_table_request(n.CONTINUATIONS, STAGE))
    return ContinuationStore(n.CONTINUATIONS.physical(STAGE))


class Router:
    def __init__(self, tools_session: ToolsSession, store: ContinuationStore, allow: list[str]) -> None:
        self.session, self.store, self.allow = tools_session, store, allow
        self.runner = tools_session.tools()
        self.events: list[dict[str, Any]] = []

    def __call__(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        event = json.loads(body)
        self.events.append(event)
        try:
            if event["action"] == "execute_code":
                owner = Owner(event["tenant_id"], event["agent_id"], event["turn_id"])
                step = start_call(
                    self.runner,
                    self.store,
                    owner=owner,
                    call={"invocation_id": event["call_id"]},
                    interpreter_id=self.session.interpreter_id,
                    session_id=self.session.session_id,
                    code=event["code"],
                    allow=self.allow,
                    invocation_id=event["call_id"],
                )
            else:
                req = parse_resume_event(event)
                claimed = claim(self.store, req, until=time.time() + 300)
                step = resume_call(self.runner, self.store, claimed, req)
        except SandboxFailure as exc:
            return 200, {}, json.dumps(exc.to_response()).encode()
        except Answered as answered:  # a resume of a call that already ended (as dispatch answers it)
            return 200, {}, json.dumps(answered.response).encode()
        if step.response is not None:
            return 200, {}, json.dumps(step.response).encode()
        assert step.finished is not None
        result = step.finished.result
        answer = {
            "ok": result.ok,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "exit_status": result.exit_status,
            "stdout_bytes": result.stdout_bytes,
            "tool_calls": step.finished.tool_calls,
        }
        if event["action"] == "resume":
            self.store.settle(claimed, answer)  # the call ended: as dispatch's resume settles it
        return 200, {}, json.dumps(answer).encode()


@pytest.fixture
def router(tools_session: ToolsSession, store: ContinuationStore) -> Iterator[tuple[Router, Any]]:
    route = Router(tools_session, store, ["query_sales", "fails", "not_here"])
    with http_endpoint(route) as endpoint:
        yield route, boto3.client("lambda", endpoint_url=endpoint)


def _turn(client: Any, **tools: Any) -> SandboxTurn:
    return SandboxTurn(
        "fn",
        tenant_id="acme",
        agent_id="agent-7",
        template_id="analyst",
        turn_id="turn-1",
        lambda_client=client,
        tools=tools,
    )


def test_agent_client_runs_the_tool_loop_and_returns_only_the_final_result(
    router: tuple[Router, Any],
) -> None:
    # Given a turn whose agent has a query_sales tool
    route, client = router
    seen: list[str] = []

    def query_sales(region: str) -> dict[str, Any]:
        seen.append(region)
        return {"region": region, "amount": len(region)}

    turn = _turn(client, query_sales=query_sales)

    # When code loops over the tool
    result = turn.execute_code(
        "from sandbox_tools import tools\n"
        "print(sum(tools.query_sales(region=r)['amount'] for r in ['EU', 'APAC', 'US']))\n"
    )

    # Then the client ran the tool 3 times and returned only the final result
    assert seen == ["EU", "APAC", "US"]
    assert (result.ok, result.stdout, result.tool_calls) == (True, "8\n", 3)
    assert [e["action"] for e in route.events] == ["execute_code", "resume", "resume", "resume"]
    assert all("tool_call" not in e for e in route.events)


def test_agent_client_tool_raising_reaches_code_as_tool_error(router: tuple[Router, Any]) -> None:
    # Given a tool that raises, and an allowlisted name the agent runtime does not have
    _, client = router

    def fails() -> None:
        raise LookupError("no such region")

    turn = _turn(client, fails=fails)

    # When the code calls both and catches ToolError
    result = turn.execute_code(
        "from sandbox_tools import tools, ToolError\n"
        "for name in ('fails', 'not_here'):\n"
        "    try:\n        tools.call(name)\n    except ToolError as e:\n        print(name, '->', e)\n"
    )

    # Then the code saw each error message as ToolError
    assert result.stdout == (
        "fails -> LookupError: no such region\n"
        "not_here -> tool 'not_here' is not available in this agent runtime\n"
    )
    assert result.tool_calls == 2


def test_resume_continuation_reused_or_foreign_is_refused_and_runs_nothing(
    router: tuple[Router, Any], tools_session: ToolsSession
) -> None:
    # Given a call paused on a tool, with a side effect counted before it
    route, client = router
    turn = _turn(client)
    paused = turn._invoke(
        {
            "action": "execute_code",
            "tenant_id": "acme",
            "agent_id": "agent-7",
            "template_id": "analyst",
            "turn_id": "turn-1",
            "call_id": "call-1",
            "code": "from sandbox_tools import tools\ncount = 1\nv = tools.query_sales()\ncount += 1\n",
        }
    )
    assert paused["status"] == "tool_call"
    base = {
        "action": "resume",
        "tenant_id": "acme",
        "agent_id": "agent-7",
        "turn_id": "turn-1",
        "continuation": paused["continuation"],
        "tool_result": 1,
    }

    # When it is presented by another turn, agent and tenant
    refusals = [
        turn._invoke({**base, **other})
        for other in ({"turn_id": "turn-2"}, {"agent_id": "agent-8"}, {"tenant_id": "globex"})
    ]
    # Then each is refused and the code did not move on
    assert [r["error"] for r in refusals] == ["SandboxInvalidRequest"] * 3
    probe = tools_session.runner.execute(
        tools_session.interpreter_id, tools_session.session_id, "print(count)"
    )
    assert probe.stdout == "1\n"

    # When the owner resumes, then reuses the same continuation
    done = turn._invoke(base)
    reused = turn._invoke(base)

    # Then the first finished the code once, the reuse got that final answer and ran nothing
    assert (done["ok"], done["tool_calls"]) == (True, 1)
    assert reused == done
    assert (
        tools_session.runner.execute(
            tools_session.interpreter_id, tools_session.session_id, "print(count)"
        ).stdout
        == "2\n"
    )


def test_tool_inputs_and_results_appear_in_no_log_line_nor_stored_item(
    router: tuple[Router, Any], capfd: pytest.CaptureFixture[str]
) -> None:
    # Given distinctive tool input and result values
    route, client = router
    secret_input, secret_result = "INPUT-7c1f2b9e", "RESULT-d2a94e01"
    turn = _turn(client, query_sales=lambda region: secret_result)
    capfd.readouterr()

    # When code calls the tool (the runner logs what it logs; the store keeps its items)
    result = turn.execute_code(
        f"from sandbox_tools import tools\nv = tools.query_sales(region={secret_input!r})\n"
    )
    items = aws.client("dynamodb").scan(TableName=route.store.table_name)["Items"]

    # Then neither value is in any log line or stored item (the call still happened)
    logs = capfd.readouterr()
    assert result.tool_calls == 1
    assert len(items) == 1
    # (the paused state while paused; the final answer once its call ended)
    stored = repr(items) + "".join(
        __import__("zlib").decompress(bytes(items[0][k]["B"])).decode()
        for k in ("state", "answer")
        if k in items[0]
    )
    for value in (secret_input, secret_result):
        assert value not in logs.out
        assert value not in logs.err
        assert value not in stored


def test_expire_turn_ends_paused_calls_as_timeouts_with_their_records(
    router: tuple[Router, Any], tools_session: ToolsSession
) -> None:
    # Given a call of turn-1 paused on a tool
    from dispatch.tools.calls import expire_turn, finished_fields

    route, client = router
    paused = _turn(client)._invoke(
        {
            "action": "execute_code",
            "tenant_id": "acme",
            "agent_id": "agent-7",
            "template_id": "analyst",
            "turn_id": "turn-1",
            "call_id": "call-9",
            "code": "from sandbox_tools import tools\nprint('before')\ntools.query_sales(r=1)\n",
        }
    )
    assert paused["status"] == "tool_call"

    # When the turn's paused calls are expired (end_turn / reaper)
    steps = expire_turn(route.store, lambda claimed: route.runner, tenant_id="acme", turn_id="turn-1")

    # Then the one call ended as a timeout, with its output and its (failed) tool record, the
    # session is stopped, and its continuation can no longer be resumed
    assert len(steps) == 1
    finished = steps[0].finished
    assert finished is not None
    assert (finished.result.exit_status, finished.result.stdout) == ("timeout", "before\n")
    response_fields, audit_fields = finished_fields(finished)
    assert response_fields == {"tool_calls": 1}
    assert audit_fields["tool_call_records"][0]["name"] == "query_sales"
    assert audit_fields["tool_call_records"][0]["ok"] is False
    assert tools_session.alive() is False
    again = _turn(client)._invoke(
        {
            "action": "resume",
            "tenant_id": "acme",
            "agent_id": "agent-7",
            "turn_id": "turn-1",
            "continuation": paused["continuation"],
            "tool_result": 1,
        }
    )
    assert again["error"] == "SandboxInvalidRequest"
