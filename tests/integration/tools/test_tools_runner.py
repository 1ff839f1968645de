"""Programmatic tool calling through the session runner on the real local interpreter."""

from __future__ import annotations

import json
import time

from sandbox_runtime.runner.tool_calling import Finished, Paused, ToolsRunner

from tests.support.tools_session import ToolsSession

LOOP_50 = """\
import sandbox_tools
from sandbox_tools import tools
side_effects = []
total = 0
for i in range(50):
    side_effects.append(i)          # a side effect BEFORE each call
    row = tools.lookup(i=i)
    total += row["value"]
print("total", total, "effects", len(side_effects))
"""


def _answer_all(runner: ToolsRunner, first: Paused | Finished, answer) -> tuple[Finished, list]:
    seen = []
    outcome = first
    while isinstance(outcome, Paused):
        seen.append(outcome.tool_call)
        outcome = runner.resume(outcome.state, tool_result=answer(outcome.tool_call))
    return outcome, seen


def test_tools_runner_fifty_calls_end_in_one_result_without_replay(tools_session: ToolsSession) -> None:
    # Given a program that calls a tool 50 times, with a side effect before each call
    runner = tools_session.tools()

    # When every tool call is answered
    first = runner.execute(
        tools_session.interpreter_id, tools_session.session_id, LOOP_50, allow=["lookup"], call_ref="inv-1"
    )
    final, calls = _answer_all(runner, first, lambda call: {"value": call.input["i"] * 2})

    # Then one final result, 50 calls in order, and each side effect happened exactly once
    assert isinstance(final, Finished)
    assert final.result.exit_status == "ok", final.result
    assert final.tool_calls == 50
    assert [c.input for c in calls] == [{"i": i} for i in range(50)]
    assert [c.id for c in calls][:2] == ["inv-1-1", "inv-1-2"]
    assert final.result.stdout == f"total {sum(i * 2 for i in range(50))} effects 50\n"
    assert final.result.stdout_bytes == len(final.result.stdout.encode())
    # And the session state shows no replay: the list has 50 entries, not more
    check = tools_session.runner.execute(
        tools_session.interpreter_id, tools_session.session_id, "print(side_effects == list(range(50)))"
    )
    assert check.stdout == "True\n"


def test_tools_runner_output_of_every_slice_is_accumulated_exactly(tools_session: ToolsSession) -> None:
    # Given code that prints before, between and after tool calls, on both streams, no final newline
    code = (
        "import sys\nfrom sandbox_tools import tools\n"
        "print('before')\nsys.stderr.write('e1')\n"
        "x = tools.echo(v='a')\nprint('got', x)\n"
        "y = tools.echo(v='b')\n_ = sys.stdout.write('end:' + y)\n"
    )
    runner = tools_session.tools()

    # When run with each call answered
    first = runner.execute(
        tools_session.interpreter_id, tools_session.session_id, code, allow=["echo"], call_ref="c"
    )
    final, calls = _answer_all(runner, first, lambda call: call.input["v"])

    # Then stdout/stderr are the concatenation of every slice, byte-exact, no marker counted
    assert final.result.stdout == "before\ngot a\nend:b"
    assert final.result.stdout_bytes == len(b"before\ngot a\nend:b")
    assert final.result.stderr == "e1"
    assert final.result.stderr_bytes == 2
    assert "__SANDBOX_TOOLS__" not in final.result.full_stdout
    assert len(calls) == 2


def test_tools_runner_unlisted_tool_raises_without_round_trip(tools_session: ToolsSession) -> None:
    # Given code calling a tool that is not on the allowlist
    code = (
        "from sandbox_tools import tools, ToolNotAllowed\n"
        "try:\n    tools.drop_tables(x=1)\nexcept ToolNotAllowed as exc:\n    print('refused:', exc)\n"
    )
    runner = tools_session.tools()

    # When executed
    outcome = runner.execute(
        tools_session.interpreter_id, tools_session.session_id, code, allow=["lookup"], call_ref="c"
    )

    # Then it finished at once (no tool_call): the refusal happened inside the code
    assert isinstance(outcome, Finished)
    assert outcome.tool_calls == 0
    assert outcome.result.stdout.startswith("refused: tool 'drop_tables' is not available")
    assert "allowed: lookup" in outcome.result.stdout


def test_tools_runner_fifty_first_call_raises_tool_call_limit(tools_session: ToolsSession) -> None:
    # Given code that calls a tool 51 times
    code = (
        "from sandbox_tools import tools, ToolCallLimit\n"
        "n = 0\ntry:\n    for i in range(51):\n        tools.ping()\n        n += 1\n"
        "except ToolCallLimit as exc:\n    print('limit after', n, type(exc).__name__)\n"
    )
    runner = tools_session.tools()

    # When every call that reaches the agent is answered
    first = runner.execute(
        tools_session.interpreter_id, tools_session.session_id, code, allow=["ping"], call_ref="c"
    )
    final, calls = _answer_all(runner, first, lambda call: None)

    # Then 50 calls made the round trip and the 51st raised ToolCallLimit in the code
    assert len(calls) == 50
    assert final.tool_calls == 50
    assert final.result.stdout == "limit after 50 ToolCallLimit\n"


def test_tools_runner_result_over_one_mib_reaches_code_as_tool_error(tools_session: ToolsSession) -> None:
    # Given a tool whose result is 1 MiB + 1 byte serialized (a JSON string: 2 quotes + payload)
    code = (
        "from sandbox_tools import tools, ToolError\n"
        "try:\n    tools.big()\nexcept ToolError as exc:\n    print('tool error:', exc)\n"
        "ok = tools.big()\nprint(len(ok))\n"
    )
    runner = tools_session.tools()
    first = runner.execute(
        tools_session.interpreter_id, tools_session.session_id, code, allow=["big"], call_ref="c"
    )
    assert isinstance(first, Paused)

    # When the first answer is 1 MiB + 1 serialized and the second exactly 1 MiB
    second = runner.resume(first.state, tool_result="x" * (1024 * 1024 - 1))
    assert isinstance(second, Paused)
    final = runner.resume(second.state, tool_result="y" * (1024 * 1024 - 2))

    # Then the first became a ToolError in the code, the second arrived whole
    assert isinstance(final, Finished)
    assert (
        final.result.stdout
        == "tool error: tool result is 1048577 bytes serialized, over the 1048576-byte limit\n"
        f"{1024 * 1024 - 2}\n"
    )
    assert [r.ok for r in final.records] == [False, True]


def test_tools_runner_tool_error_is_raised_in_code(tools_session: ToolsSession) -> None:
    # Given code that catches ToolError
    code = (
        "from sandbox_tools import tools, ToolError\ntry:\n    tools.q(a=1)\nexcept ToolError as e:\n   "
        " print('E:', e)\n"
    )
    runner = tools_session.tools()
    first = runner.execute(
        tools_session.interpreter_id, tools_session.session_id, code, allow=["q"], call_ref="c"
    )

    # When the agent answers with a tool error
    final = runner.resume(first.state, tool_error="region not found", has_result=False)

    # Then the code got the tool's message
    assert final.result.stdout == "E: region not found\n"
    assert final.records[0].ok is False
    assert final.records[0].input_sha256 == __import__("hashlib").sha256(b'{"a":1}').hexdigest()


def test_tools_runner_wait_beyond_bound_is_timeout_and_stops_session(tools_session: ToolsSession) -> None:
    # Given a call paused on a tool, and a wait bound of 0.2 s
    clock = {"now": 1_000_000}
    runner = ToolsRunner(
        tools_session.runner,
        limits=tools_session.tools(wait_seconds=0.2).limits,
        wall_clock_ms=lambda: clock["now"],
    )
    code = "from sandbox_tools import tools\nprint('started')\ntools.slow()\nprint('never')\n"
    first = runner.execute(
        tools_session.interpreter_id, tools_session.session_id, code, allow=["slow"], call_ref="c"
    )
    assert isinstance(first, Paused)

    # When the result arrives after the bound
    clock["now"] += 201
    final = runner.resume(first.state, tool_result=1)

    # Then the call ends SandboxTimeout, the code never continued, the session is stopped
    assert isinstance(final, Finished)
    assert final.result.exit_status == "timeout"
    assert final.result.error == "SandboxTimeout"
    assert final.result.session_stopped is True
    assert final.result.stdout == "started\n"
    assert tools_session.alive() is False


def test_tools_runner_exception_after_tool_call_is_reported_like_plain_code(
    tools_session: ToolsSession,
) -> None:
    # Given code that fails after a tool call
    code = "from sandbox_tools import tools\nv = tools.t()\n1 / v\n"
    runner = tools_session.tools()
    first = runner.execute(
        tools_session.interpreter_id, tools_session.session_id, code, allow=["t"], call_ref="c"
    )

    # When the tool answers 0
    final = runner.resume(first.state, tool_result=0)

    # Then exit 1, error, the traceback ends with the user's exception
    assert final.result.exit_status == "error"
    assert final.result.exit_code == 1
    assert final.result.stderr.rstrip().endswith("ZeroDivisionError: division by zero")
    assert final.tool_calls == 1


def test_tools_runner_token_in_tool_result_printed_is_redacted(tools_session: ToolsSession) -> None:
    # Given code that prints what the tool returned
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    code = "from sandbox_tools import tools\nprint('secret:', tools.get())\n"
    runner = tools_session.tools()
    first = runner.execute(
        tools_session.interpreter_id, tools_session.session_id, code, allow=["get"], call_ref="c"
    )

    # When the tool returns a token
    final = runner.resume(first.state, tool_result=token)

    # Then stdout has it redacted like any other output
    assert token not in final.result.stdout
    assert final.result.stdout == "secret: <redacted>\n"


def test_tools_runner_state_survives_serialization_between_invocations(tools_session: ToolsSession) -> None:
    # Given a paused call whose state is serialized (as dispatch stores it between invocations)
    code = "from sandbox_tools import tools\nprint('a' * 10)\nprint(tools.t(k='v'))\n"
    runner = tools_session.tools()
    first = runner.execute(
        tools_session.interpreter_id, tools_session.session_id, code, allow=["t"], call_ref="c"
    )
    assert isinstance(first, Paused)
    from sandbox_runtime.runner.tool_calling import ToolCallState

    stored = json.loads(
        json.dumps({k: v for k, v in first.state.to_dict().items() if not k.endswith("_head")})
    )
    stored.update(stdout_head=first.state.stdout.head_bytes, stderr_head=first.state.stderr.head_bytes)

    # When a fresh runner resumes from the restored state
    final = tools_session.tools().resume(ToolCallState.from_dict(stored), tool_result="ok")

    # Then the output of both slices is there
    assert final.result.stdout == "a" * 10 + "\nok\n"


def test_tools_runner_forged_call_to_unlisted_tool_stops_session(tools_session: ToolsSession) -> None:
    # Given code that tampers with the runtime to report a call to a tool outside the allowlist
    code = (
        "import sys\nrt = sys.modules['_sbx_tools_runtime']\n"
        "rt._STATE['run'].allow = frozenset({'lookup', 'delete_everything'})\n"
        "rt.tools.delete_everything(all=True)\n"
    )
    runner = tools_session.tools()

    # When executed with only `lookup` allowed
    outcome = runner.execute(
        tools_session.interpreter_id, tools_session.session_id, code, allow=["lookup"], call_ref="c"
    )

    # Then the host refuses to relay it: error, session stopped, no tool call reached the agent
    assert isinstance(outcome, Finished)
    assert outcome.result.error == "SandboxError"
    assert outcome.result.failure_reason == "tool_protocol:tool_not_allowed"
    assert outcome.result.session_stopped is True
    assert tools_session.alive() is False


def test_tools_runner_deadline_counts_running_time_not_tool_wait(tools_session: ToolsSession) -> None:
    # Given a 2 s per-call deadline and code that runs briefly around a tool call
    tools_session.runner.call_timeout_seconds = 2
    runner = tools_session.tools()
    code = (
        "import time\nfrom sandbox_tools import tools\ntime.sleep(0.3)\nv ="
        " tools.t()\ntime.sleep(0.3)\nprint(v)\n"
    )
    first = runner.execute(
        tools_session.interpreter_id, tools_session.session_id, code, allow=["t"], call_ref="c"
    )
    assert isinstance(first, Paused)

    # When the tool takes longer than the whole deadline
    time.sleep(2.2)
    final = runner.resume(first.state, tool_result="done")

    # Then the call still ends ok: waiting for a tool is not running time
    assert final.result.exit_status == "ok"
    assert final.result.stdout == "done\n"
    assert 600 <= final.result.duration_ms < 2000


def test_tools_runner_running_time_over_slices_hits_the_deadline(tools_session: ToolsSession) -> None:
    # Given a 2 s deadline and code that runs 1.2 s before and 1.2 s after a tool call
    tools_session.runner.call_timeout_seconds = 2
    runner = tools_session.tools()
    code = (
        "import time\nfrom sandbox_tools import"
        " tools\ntime.sleep(1.2)\ntools.t()\ntime.sleep(1.2)\nprint('late')\n"
    )
    first = runner.execute(
        tools_session.interpreter_id, tools_session.session_id, code, allow=["t"], call_ref="c"
    )
    assert isinstance(first, Paused)

    # When resumed
    final = runner.resume(first.state, tool_result=None)

    # Then the second slice only had what was left: timeout, session stopped
    assert final.result.exit_status == "timeout"
    assert final.result.session_stopped is True
    assert tools_session.alive() is False


def test_tools_runner_output_beyond_the_interpreters_limit_still_pauses(tools_session: ToolsSession) -> None:
    # Given code that prints more than the local interpreter returns (1 MiB) before a tool call
    code = "from sandbox_tools import tools\nprint('x' * (1536 * 1024))\nprint(tools.t(n=1))\n"
    runner = tools_session.tools()

    # When executed (the marker is cut off with the output; the runner asks the runtime)
    first = runner.execute(
        tools_session.interpreter_id, tools_session.session_id, code, allow=["t"], call_ref="c"
    )

    # Then the call still paused on the right tool call and completes
    assert isinstance(first, Paused)
    assert (first.tool_call.name, first.tool_call.input) == ("t", {"n": 1})
    final = runner.resume(first.state, tool_result="fine")
    assert final.result.exit_status == "ok"
    assert final.result.stdout_truncated is True
    # And the byte count is exactly the code's (no marker of ours counted)
    assert final.result.stdout_bytes == 1536 * 1024 + 1 + len("fine\n")


def test_tools_runner_new_run_while_one_is_paused_is_refused(tools_session: ToolsSession) -> None:
    # Given a call paused on a tool
    runner = tools_session.tools()
    first = runner.execute(
        tools_session.interpreter_id,
        tools_session.session_id,
        "from sandbox_tools import tools\ntools.t()\n",
        allow=["t"],
        call_ref="c1",
    )
    assert isinstance(first, Paused)

    # When another tool-calling execution starts in the same session
    second = runner.execute(
        tools_session.interpreter_id, tools_session.session_id, "print('second')", allow=["t"], call_ref="c2"
    )

    # Then it is refused without running, and the paused call can still finish
    assert isinstance(second, Finished)
    assert second.result.failure_reason == "tool_protocol:busy"
    assert second.result.stdout == ""
    assert second.result.session_stopped is False
    assert runner.resume(first.state, tool_result=1).result.exit_status == "ok"


def test_tools_runner_plain_code_cannot_call_tools(tools_session: ToolsSession) -> None:
    # Given a session with the tools runtime installed
    # When ordinary (non-tool-calling) code calls a tool
    result = tools_session.runner.execute(
        tools_session.interpreter_id,
        tools_session.session_id,
        "from sandbox_tools import tools, ToolError\ntry:\n    tools.t()\nexcept ToolError as e:\n   "
        " print(type(e).__name__)\n",
    )

    # Then it is refused in the code (no allowlist outside a tool-calling execution)
    assert result.stdout == "ToolNotAllowed\n"


def test_tools_runner_keeps_notebook_semantics(tools_session: ToolsSession) -> None:
    # Given code with a trailing expression and globals used by a later ordinary call
    runner = tools_session.tools()
    first = runner.execute(
        tools_session.interpreter_id,
        tools_session.session_id,
        "from sandbox_tools import tools\nanswer = tools.t()\nanswer * 2",
        allow=["t"],
        call_ref="c",
    )

    # When resumed, and a later plain call reads the variable
    final = runner.resume(first.state, tool_result=21)
    later = tools_session.runner.execute(
        tools_session.interpreter_id, tools_session.session_id, "print(answer)"
    )

    # Then the trailing expression was displayed and the variable lives in the session globals
    assert final.result.stdout == "42\n"
    assert later.stdout == "21\n"


def test_tools_runner_sys_exit_after_a_tool_call_sets_the_exit_code(tools_session: ToolsSession) -> None:
    # Given code that exits with 3 after a tool call
    runner = tools_session.tools()
    first = runner.execute(
        tools_session.interpreter_id,
        tools_session.session_id,
        "import sys\nfrom sandbox_tools import tools\ntools.t()\nsys.exit(3)",
        allow=["t"],
        call_ref="c",
    )

    # When resumed
    final = runner.resume(first.state, tool_result=None)

    # Then the exit code is the code's, as for ordinary code
    assert final.result.exit_code == 3
    assert final.result.exit_status == "error"


def test_tools_runner_output_beyond_the_interpreters_limit_at_the_end_still_finishes(
    tools_session: ToolsSession,
) -> None:
    # Given code that calls a tool, then prints more than the local interpreter returns and ends
    code = "from sandbox_tools import tools\nv = tools.t()\nprint(v * (1536 * 1024))\n"
    runner = tools_session.tools()
    first = runner.execute(
        tools_session.interpreter_id, tools_session.session_id, code, allow=["t"], call_ref="c"
    )
    assert isinstance(first, Paused)

    # When resumed (the end marker is cut off with the output; the runner asks the runtime)
    final = runner.resume(first.state, tool_result="z")

    # Then the call ended ok (not a protocol error), the session kept, output truncated
    assert isinstance(final, Finished)
    assert final.result.exit_status == "ok", final.result.failure_reason
    assert final.result.session_stopped is False
    assert final.result.stdout_truncated is True
    assert final.result.stdout_bytes == 1536 * 1024 + 1
    assert final.tool_calls == 1
