"""One tool surface for every client, against the running local stack: begin_turn's
tools, the MCP server's (official SDK client over stdio) and the Strands tools (a real
`strands.Agent` driven by a scripted model) are the same definitions; the model sees small
artifacts (a real matplotlib chart as a PNG image, a small text as text); every failure is an
error where the client can mark one."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import pytest
from mcp.client.session import ClientSession
from sandbox_client.contract import new_token
from sandbox_client.turn import SandboxTurn
from sandbox_common import dimensions
from sandbox_common import naming as n
from sandbox_common.tool_spec import tool_definitions
from strands import Agent

from infra.local.state import LocalState
from tests.support.local_stack import ctl
from tests.support.mcp_client import image_bytes, mcp_args, png_size, run_mcp, text_of
from tests.support.strands_model import ScriptedModel, call, last_answer, poll, tool_results

TENANT, TEMPLATE = "acme", "analyst"
CAP_TENANT = "globex"  # its agents' hourly cap is 0 (the kill switch) in the cap tests of this suite
TOOLS_TEMPLATE = "tools-analyst"
# A chart left open (it comes back as figure-1.png, 4 x 3 in at 100 dpi), a small text artifact
# and one over the 16 KiB the model sees inline.
CHART = (
    "import os\nimport matplotlib.pyplot as plt\n"
    "fig, ax = plt.subplots(figsize=(4, 3), dpi=100)\nax.plot([1, 2, 3], [2, 4, 3])\n"
    "os.makedirs('outputs', exist_ok=True)\n"
    "open('outputs/summary.txt', 'w').write('total: 9\\n')\n"
    "open('outputs/big.txt', 'w').write('x' * 20000)\n"
)
CHART_SIZE = (400, 300)
READ_SALES_JS = (
    "const fs = require('fs');\nconsole.log(fs.readFileSync('data/sales.csv', 'utf8').split('\\n')[1])"
)
SUM_SALES = "import csv\nprint(sum(int(r['amount']) for r in csv.DictReader(open('data/sales.csv'))))"


def _turn(state: LocalState, tenant_id: str = TENANT, **extra: Any) -> SandboxTurn:
    return SandboxTurn(
        state.resources.functions[n.DISPATCH],
        tenant_id=tenant_id,
        agent_id="surface-agent",
        template_id=extra.pop("template_id", TEMPLATE),
        lambda_client=state.client("lambda"),
        **extra,
    )


def _agent(model: ScriptedModel, tools: list[Any]) -> Agent:
    return Agent(model=model, tools=tools, callback_handler=None)


@pytest.fixture(scope="module")
def mcp(env: dict[str, str]) -> dict[str, Any]:
    """One MCP session on acme's analyst template (one server process, one turn), as a host drives
    it: list the tools, send a file, draw a chart, submit a job and poll it with get_job to its
    end, a job that exits 3, get_job of an unknown id, a shell command. The tests below read what
    came back."""
    csv = base64.b64encode(b"region,amount\neu,5\nus,4\n").decode()

    async def poll_job(session: ClientSession, job_id: str) -> Any:
        while True:  # waits on the job's state (each get_job is a round trip to the session)
            answer = await session.call_tool("get_job", {"job_id": job_id})
            if (answer.structured_content or {}).get("status") != "running":
                return answer

    async def script(session: ClientSession) -> dict[str, Any]:
        seen: dict[str, Any] = {"tools": (await session.list_tools()).tools}
        seen["read"] = await session.call_tool(
            "execute_code",
            {"code": SUM_SALES, "files": [{"path": "data/sales.csv", "content_base64": csv}]},
        )
        seen["chart"] = await session.call_tool("execute_code", {"code": CHART})
        seen["submitted"] = await session.call_tool(
            "execute_code", {"code": "print('job done')", "background": True, "timeout_s": 120}
        )
        seen["done"] = await poll_job(session, seen["submitted"].structured_content["job_id"])
        failing = await session.call_tool("execute_code", {"code": "raise SystemExit(3)", "background": True})
        seen["failed"] = await poll_job(session, failing.structured_content["job_id"])
        seen["unknown"] = await session.call_tool("get_job", {"job_id": "job-unknown"})
        seen["command"] = await session.call_tool("run_command", {"command": "echo $((6*7))"})
        seen["javascript"] = await session.call_tool(
            "execute_code",
            {
                "code": READ_SALES_JS,
                "language": "javascript",
            },
        )
        seen["typescript"] = await session.call_tool(
            "execute_code",
            {"code": "const answer: number = 6 * 7;\nconsole.log(answer);", "language": "typescript"},
        )
        seen["js_error"] = await session.call_tool(
            "execute_code", {"code": "throw new TypeError('bad')", "language": "javascript"}
        )
        seen["bad_language"] = await session.call_tool("execute_code", {"code": "puts 1", "language": "ruby"})
        return seen

    return dict(run_mcp(env, mcp_args(TENANT, TEMPLATE), script))


# --- one definition --------------------------------------------------------------------------------
def test_one_definition_begin_turn_mcp_and_strands_serve_the_same_tools(
    state: LocalState, mcp: dict[str, Any]
) -> None:
    # Given begin_turn's tools for an agent-client turn, and the Strands tools a real Agent offers
    # its model
    model = ScriptedModel([])
    with _turn(state) as turn:
        begun = turn.definitions
        agent = _agent(model, turn.strands_tools())
        agent("list your tools")
    strands_specs = {spec["name"]: spec for spec in model.tool_specs[0]}
    # When an MCP host lists the tools of the same template
    listed = mcp["tools"]
    # Then begin_turn served the one definition (the stage's default limits), every tool of it
    assert begun == tool_definitions()
    names = [d["name"] for d in begun]
    assert names == ["execute_code", "run_command", "get_job", "cancel_job"]
    # And MCP and Strands serve the same names, input schemas and descriptions
    assert [t.name for t in listed] == names and sorted(strands_specs) == sorted(names)
    assert [t.input_schema for t in listed] == [d["input_schema"] for d in begun]
    assert [strands_specs[name]["inputSchema"]["json"] for name in names] == [
        d["input_schema"] for d in begun
    ]
    assert [t.description for t in listed] == [d["description"] for d in begun]
    assert [strands_specs[name]["description"] for name in names] == [d["description"] for d in begun]


def test_template_tools_are_listed_only_to_clients_that_can_answer_them(
    env: dict[str, str], state: LocalState
) -> None:
    # Given a template whose code may call query_sales and lookup
    put = ctl(
        env, "template", "put", TENANT, TOOLS_TEMPLATE, "--environment", "default-public",
        "--tools", "query_sales,lookup",
    )  # fmt: skip
    assert put.returncode == 0, put.stderr
    # When a caller of before client_tools begins a turn, an agent client with one of the tools
    # does, and an MCP host lists its tools
    lambda_client = state.client("lambda")
    event = {
        "action": "begin_turn", "tenant_id": TENANT, "agent_id": "a-old", "template_id": TOOLS_TEMPLATE,
        "turn_id": f"old-{uuid.uuid4().hex[:8]}", "turn_token": new_token(),
    }  # fmt: skip
    old = json.loads(
        lambda_client.invoke(FunctionName=state.resources.functions[n.DISPATCH], Payload=json.dumps(event))[
            "Payload"
        ].read()
    )
    with _turn(state, template_id=TOOLS_TEMPLATE, tools={"query_sales": lambda region: 1}) as client_turn:
        client_description = client_turn.definitions[0]["description"]

    async def script(session: ClientSession) -> Any:
        return (await session.list_tools()).tools

    mcp_description = run_mcp(env, mcp_args(TENANT, TOOLS_TEMPLATE), script)[0].description
    # Then the old caller sees both, the client only the one it answers, the MCP host none
    assert "Tools: lookup, query_sales." in old["sandbox"]["tool"]["description"]
    assert "Tools: query_sales." in client_description and "lookup" not in client_description
    assert "sandbox_tools" not in mcp_description and "query_sales" not in mcp_description


# --- MCP ---------------------------------------------------------------------------------------------
def test_mcp_files_in_reach_the_code(mcp: dict[str, Any]) -> None:
    # Given an MCP call that sent data/sales.csv inline / Then the code read it
    read = mcp["read"]
    assert read.is_error is False, text_of(read)
    assert read.structured_content["stdout"] == "9\n"


def test_mcp_chart_comes_back_as_a_png_image_and_small_text_as_text(mcp: dict[str, Any]) -> None:
    # Given an MCP call that left a chart open and wrote a small and a large text artifact
    chart = mcp["chart"]
    assert chart.is_error is False, text_of(chart)
    kinds = [block.type for block in chart.content]
    links = {block.name: block for block in chart.content if block.type == "resource_link"}
    assert sorted(links) == ["big.txt", "figure-1.png", "summary.txt"]
    # Then the chart is an image holding a valid PNG of the figure's size (the stored bytes)
    images = [block for block in chart.content if block.type == "image"]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    png = image_bytes(images[0])
    assert png_size(png) == CHART_SIZE
    assert len(png) == links["figure-1.png"].size
    # And the small text comes back as text, each just before its link; the large one as a link only
    texts = [block.text for block in chart.content if block.type == "text"]
    assert texts[1:] == ["total: 9\n"]  # the answer's JSON first, then the small artifact
    position = {block.name: i for i, block in enumerate(chart.content) if block.type == "resource_link"}
    assert kinds[position["figure-1.png"] - 1] == "image" and kinds[position["summary.txt"] - 1] == "text"
    assert position["big.txt"] == 1 or kinds[position["big.txt"] - 1] == "resource_link"  # no preview


def test_mcp_background_job_polled_to_completion_and_job_failures_as_errors(mcp: dict[str, Any]) -> None:
    # Given a job submitted through execute_code (background) and polled with get_job
    submitted, done = mcp["submitted"], mcp["done"]
    # Then the submit answered at once, and the poll ended with the job's result
    assert submitted.is_error is False and submitted.structured_content["status"] == "running"
    assert done.is_error is False, text_of(done)
    assert (done.structured_content["status"], done.structured_content["stdout"]) == (
        "completed",
        "job done\n",
    )
    # And a job that exited 3 and an unknown job id are tool errors naming their class
    failed, unknown = mcp["failed"], mcp["unknown"]
    assert failed.is_error is True and text_of(failed).startswith("SandboxError: ")
    assert (failed.structured_content["status"], failed.structured_content["exit_code"]) == ("failed", 3)
    assert unknown.is_error is True and text_of(unknown).startswith("SandboxInvalidRequest: ")


def test_mcp_run_command_runs_a_shell_script(mcp: dict[str, Any]) -> None:
    # Given an MCP call of run_command `echo $((6*7))` / Then bash's output
    result = mcp["command"]
    assert result.is_error is False, text_of(result)
    assert result.structured_content["stdout"] == "42\n"


def test_mcp_runs_javascript_and_typescript_in_the_turns_session(mcp: dict[str, Any]) -> None:
    # Given MCP calls of execute_code with a language / Then Node.js ran them in the turn's session
    # (the file an earlier call sent is there), a thrown error is a tool error saying what was thrown
    js, ts = mcp["javascript"], mcp["typescript"]
    assert js.is_error is False and js.structured_content["stdout"] == "eu,5\n", text_of(js)
    assert ts.is_error is False and ts.structured_content["stdout"] == "42\n", text_of(ts)
    assert js.structured_content["session_id"] == mcp["read"].structured_content["session_id"]
    error = mcp["js_error"]
    assert error.is_error is True and text_of(error).startswith(
        "SandboxError: The code raised TypeError: bad"
    )
    assert error.structured_content["exception"]["name"] == "TypeError"
    # And a language the definition does not offer is refused before anything is sent
    bad = mcp["bad_language"]
    assert bad.is_error is True and text_of(bad).startswith("SandboxInvalidRequest: language: ")


def test_strands_and_the_client_run_javascript_and_a_background_typescript_job(state: LocalState) -> None:
    # Given a real Agent whose model runs JavaScript, then TypeScript in the background
    script = [
        call(
            "execute_code",
            {"code": "console.log([1, 2, 3].map((x) => x * 14).pop())", "language": "javascript"},
        ),
        call(
            "execute_code",
            {
                "code": "const x: number = 6 * 7; console.log(x);",
                "language": "typescript",
                "background": True,
            },
        ),
        poll("get_job", lambda answer: {"job_id": answer["job_id"]}),
    ]
    with _turn(state) as turn:
        agent = _agent(ScriptedModel(script), turn.strands_tools())
        agent("run the programs")
        # And the agent client's own calls
        direct = turn.execute_code("console.log(6 * 7)", language="javascript")
        job = turn.submit("console.log('from a job')", language="javascript", timeout_s=120)
        final = turn.wait(str(job.job_id), poll_seconds=0.2, timeout_s=120)
    results = tool_results(agent.messages)
    # Then Strands saw both programs' answers as successes
    assert (
        results[0]["status"] == "success" and json.loads(results[0]["content"][0]["text"])["stdout"] == "42\n"
    )
    answers = [json.loads(r["content"][0]["text"]) for r in results[1:]]
    assert answers[0]["status"] == "running" and answers[-1]["status"] == "completed"
    assert answers[-1]["stdout"] == "42\n" and results[-1]["status"] == "success"
    # And the client's call and background job ran in the same turn's session
    assert direct.ok is True and direct.stdout == "42\n"
    assert (final.status, final.stdout) == ("completed", "from a job\n")


# --- Strands ---------------------------------------------------------------------------------------
def test_strands_agent_sees_the_chart_as_an_image_and_every_failure_as_an_error(
    state: LocalState,
) -> None:
    # Given a real Agent with the turn's tools (the surface's and the job tools of before it), and
    # a model that draws a chart, then runs jobs that fail and asks for jobs that do not exist
    script = [
        call("execute_code", {"code": CHART}),
        call("execute_code", {"code": "raise SystemExit(3)", "background": True}),
        poll("get_job", lambda answer: {"job_id": answer["job_id"]}),
        call("get_job", {"job_id": "job-unknown"}),
        call("start_background_job", {"code": "raise SystemExit(3)"}),
        call("check_background_job", lambda answer: {"job_id": answer["job_id"], "wait_seconds": 600}),
        call("check_background_job", {"job_id": "job-unknown"}),
    ]
    with _turn(state) as turn:
        agent = _agent(ScriptedModel(script), [*turn.strands_tools(), *turn.strands_job_tools()])
        # When the agent runs
        agent("draw, then run the jobs")
    results = tool_results(agent.messages)
    statuses = [r["status"] for r in results]
    # Then the chart call succeeded with the figure as an image block holding a valid PNG, and
    # the small text artifact as text
    chart = results[0]
    assert chart["status"] == "success"
    images = [block["image"] for block in chart["content"] if "image" in block]
    assert len(images) == 1 and images[0]["format"] == "png"
    assert png_size(images[0]["source"]["bytes"]) == CHART_SIZE
    assert [block["text"] for block in chart["content"] if "text" in block][1:] == ["total: 9\n"]
    # And the submits succeeded; the failed jobs (exit 3) and the unknown ids are errors
    polls = statuses[2:-4]
    assert statuses[1] == "success" and statuses[-3] == "success"
    assert polls[-1] == "error" and set(polls[:-1]) <= {"success"}
    assert statuses[-4:] == ["error", "success", "error", "error"]
    failed = [results[1 + len(polls)], results[-2]]
    assert all(r["content"][0]["text"].startswith("SandboxError: ") for r in failed)
    assert all('"exit_code": 3' in r["content"][0]["text"] for r in failed)
    assert results[-4]["content"][0]["text"].startswith("SandboxInvalidRequest: ")
    assert results[-1]["content"][0]["text"].startswith("SandboxInvalidRequest: ")


def test_strands_cap_refusals_are_errors_for_calls_and_jobs(env: dict[str, str], state: LocalState) -> None:
    # Given globex's agents at an hourly cap of 0, and a real Agent with a globex turn's tools
    assert ctl(env, "caps", "set", "agent_hourly", "0", "--tenant", CAP_TENANT).returncode == 0
    script = [
        call("execute_code", {"code": "print(1)"}),
        call("execute_code", {"code": "print(1)", "background": True}),
        call("start_background_job", {"code": "print(1)"}),
    ]
    with _turn(state, CAP_TENANT) as turn:
        agent = _agent(ScriptedModel(script), [*turn.strands_tools(), *turn.strands_job_tools()])
        # When the model calls code, a background call and the job tool of before
        agent("run it")
    # Then each is a Strands error naming SandboxCapExceeded
    results = tool_results(agent.messages)
    assert [r["status"] for r in results] == ["error"] * 3
    assert all(r["content"][0]["text"].startswith("SandboxCapExceeded: ") for r in results)
    assert last_answer(agent.messages)["dimension"] == dimensions.AGENT_HOURLY.name
