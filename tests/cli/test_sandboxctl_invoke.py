"""`sandboxctl invoke` and `pilot` through the real dispatch function: the real CLI, each command a process
of its own (`ctl`, tests/support/ctl_server.py; `invoke -` as the installed console script), against the
module's local stack (tests/cli/conftest.py)."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

from tests.support.local_stack import SANDBOXCTL, assert_one_line_failure, ctl, ctl_json, state_of
from tests.support.stack import turn_token_for

_state = state_of


# --- dispatch (needs the real dispatch function) ----------------------------------------------
def test_invoke_runs_a_turn_through_dispatch(cli_env: dict[str, str]) -> None:
    # Given a fresh turn of acme's analyst template
    turn = f"turn-{uuid.uuid4().hex[:8]}"
    base = {
        "tenant_id": "acme",
        "agent_id": "agent-cli",
        "template_id": "analyst",
        "turn_id": turn,
        "turn_token": turn_token_for("acme", turn),
    }
    # When begin_turn and two execute_code calls go through `sandboxctl invoke`
    begin = ctl_json(cli_env, "invoke", json.dumps({"action": "begin_turn", **base}))
    first = ctl_json(
        cli_env, "invoke", json.dumps({"action": "execute_code", **base, "call_id": "c1", "code": "x = 20"})
    )
    second = ctl_json(
        cli_env,
        "invoke",
        json.dumps({"action": "execute_code", **base, "call_id": "c2", "code": "print(x * 2 + 2)"}),
    )
    end = ctl_json(
        cli_env,
        "invoke",
        json.dumps(
            {
                "action": "end_turn",
                "tenant_id": "acme",
                "turn_id": turn,
                "turn_token": turn_token_for("acme", turn),
            }
        ),
    )
    # Then the sandbox is ready, state is shared in one session, and the audit trail has both calls
    assert begin["ok"] is True and begin["sandbox"]["status"] == "ready"
    assert first["ok"] is True and second["stdout"] == "42\n"
    assert first["session_id"] == second["session_id"]
    assert end == {"ok": True, "stopped": True}
    rows = ctl_json(cli_env, "audit", "list", "--tenant", "acme", "--session", second["session_id"])
    assert {r["invocation_id"] for r in rows} == {first["invocation_id"], second["invocation_id"]}


def test_invoke_rejects_non_json_event(cli_env: dict[str, str]) -> None:
    # Given an event that is not JSON
    # When invoked
    out = ctl(cli_env, "invoke", "{not json")
    # Then exit 1 with a one-line reason, before anything is sent
    assert_one_line_failure(out, 1, "not valid JSON")


def test_invoke_exits_1_on_an_answer_with_ok_false_and_still_prints_it(cli_env: dict[str, str]) -> None:
    # Given an execute_code event dispatch refuses (empty code: SandboxInvalidRequest)
    turn = f"turn-{uuid.uuid4().hex[:8]}"
    event = {
        "action": "execute_code",
        "tenant_id": "acme",
        "agent_id": "agent-cli",
        "template_id": "analyst",
        "turn_id": turn,
        "turn_token": turn_token_for("acme", turn),
        "call_id": "c-empty",
        "code": "   ",
    }
    # When invoked
    out = ctl(cli_env, "--json", "invoke", json.dumps(event))
    # Then exit 1 with the named class on one line of stderr, and the whole answer on stdout
    assert_one_line_failure(out, 1, "ok: false", "SandboxInvalidRequest")
    answer = json.loads(out.stdout)
    assert answer["ok"] is False and answer["error"] == "SandboxInvalidRequest"
    assert answer["error_message"] in out.stderr.replace("\n", " ")


def test_invoke_exits_1_when_the_code_failed(cli_env: dict[str, str]) -> None:
    # Given code that raises in the session (a result of running code, not a refusal)
    turn = f"turn-{uuid.uuid4().hex[:8]}"
    base = {
        "tenant_id": "acme",
        "agent_id": "agent-cli",
        "template_id": "analyst",
        "turn_id": turn,
        "turn_token": turn_token_for("acme", turn),
    }
    event = {"action": "execute_code", **base, "call_id": "c-raise", "code": "raise ValueError('bad')"}
    # When invoked / Then exit 1, the answer printed with what the code raised
    out = ctl(cli_env, "--json", "invoke", json.dumps(event))
    assert_one_line_failure(out, 1, "SandboxError", "ValueError")
    answer = json.loads(out.stdout)
    assert answer["exception"]["name"] == "ValueError" and answer["exception"]["value"] == "bad"
    _end_turn(cli_env, turn)


def _big_event(turn: str) -> str:
    # ~250 KiB of code: over the 128 KiB one argument may hold, under the 256 KiB code limit.
    code = (
        "x = 41\n" + ("# padding padding padding padding padding padding padding\n" * 4450) + "print(x + 1)\n"
    )
    assert 250 * 1024 <= len(code.encode()) <= 256 * 1024
    base = {
        "tenant_id": "acme",
        "agent_id": "agent-big",
        "template_id": "analyst",
        "turn_id": turn,
        "turn_token": turn_token_for("acme", turn),
    }
    return json.dumps({"action": "execute_code", **base, "call_id": f"c-{turn}", "code": code})


def _begin_big_turn(cli_env: dict[str, str]) -> str:
    """A fresh turn of agent-big, begun through `sandboxctl invoke`; its id."""
    turn = f"turn-{uuid.uuid4().hex[:8]}"
    begin = {
        "action": "begin_turn",
        "tenant_id": "acme",
        "agent_id": "agent-big",
        "template_id": "analyst",
        "turn_id": turn,
        "turn_token": turn_token_for("acme", turn),
    }
    ctl_json(cli_env, "invoke", json.dumps(begin))
    return turn


def _end_turn(cli_env: dict[str, str], turn: str) -> None:
    end = {
        "action": "end_turn",
        "tenant_id": "acme",
        "turn_id": turn,
        "turn_token": turn_token_for("acme", turn),
    }
    ctl_json(cli_env, "invoke", json.dumps(end))


def test_invoke_dash_reads_a_250_kib_event_from_stdin(cli_env: dict[str, str]) -> None:
    # Given a ~250 KiB execute_code event (too big for one argument)
    turn = _begin_big_turn(cli_env)
    event = _big_event(turn)
    assert len(event) > 128 * 1024
    # When it is piped to `sandboxctl invoke -`
    out = subprocess.run(
        [SANDBOXCTL, "--json", "invoke", "-"],
        env=cli_env,
        input=event,
        capture_output=True,
        text=True,
        timeout=180,
    )
    # Then dispatch ran it
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["stdout"] == "42\n"
    _end_turn(cli_env, turn)


def test_invoke_at_path_reads_the_event_from_a_file(cli_env: dict[str, str], tmp_path: Path) -> None:
    # Given the same ~250 KiB event in a file
    turn = _begin_big_turn(cli_env)
    path = tmp_path / "event.json"
    path.write_text(_big_event(turn))
    # When invoked as `sandboxctl invoke @PATH`
    response = ctl_json(cli_env, "invoke", f"@{path}")
    # Then dispatch ran it
    assert response["stdout"] == "42\n"
    _end_turn(cli_env, turn)


def test_invoke_at_missing_path_is_a_one_line_failure(cli_env: dict[str, str], tmp_path: Path) -> None:
    # Given a path that does not exist
    # When
    out = ctl(cli_env, "invoke", f"@{tmp_path / 'nope.json'}")
    # Then exit 1 with one line naming the file
    assert_one_line_failure(out, 1, "nope.json", "cannot read the event")


def test_pilot_fails_when_the_turn_gets_no_sandbox(cli_env: dict[str, str]) -> None:
    # Given a template without a sandbox block (begin_turn answers not_requested)
    # When the canary runs with it
    out = ctl(cli_env, "--json", "pilot", "--tenant", "globex", "--template", "no-sandbox-here")
    # Then it fails with a one-line reason naming the failed check, and restores the override
    assert_one_line_failure(out, 1, "pilot failed", "begin_turn is ready")
    report = json.loads(out.stdout)
    assert report["ok"] is False
    assert {c["check"] for c in report["checks"] if c["ok"]} >= {"agent_hourly override restored"}
    assert "globex" not in ctl_json(cli_env, "caps", "get")["overrides"]


def test_pilot_passes_on_a_healthy_stack(cli_env: dict[str, str]) -> None:
    # Given a healthy local stack (globex's caps not cached by the quota function yet)
    # When the canary runs
    out = ctl(cli_env, "--json", "pilot", "--tenant", "globex", "--cap-wait", "75")
    # Then every check passed and the override it set is gone again
    report = json.loads(out.stdout)
    assert out.returncode == 0, [c for c in report["checks"] if not c["ok"]]
    assert report["ok"] is True and len(report["checks"]) >= 10
    assert "globex" not in ctl_json(cli_env, "caps", "get")["overrides"]
