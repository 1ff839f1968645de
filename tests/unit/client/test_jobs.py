"""Agent client background jobs: submit / get_job / cancel_job / wait, against a
real HTTP endpoint speaking the Lambda Invoke API."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from sandbox_client.turn import SandboxTurn

from tests.support.http import http_endpoint


@pytest.fixture
def fake_dispatch() -> Any:
    """A dispatch whose job is running for three polls, then completed."""
    seen: list[dict[str, Any]] = []
    polls = {"n": 0}

    def answer(path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        event = json.loads(body)
        seen.append(event)
        action = event["action"]
        if action == "execute_code":
            reply = {
                "ok": True,
                "status": "running",
                "job_id": "job-1",
                "invocation_id": "inv-1",
                "session_id": "S",
            }
        elif action == "get_job":
            polls["n"] += 1
            reply = (
                {"ok": True, "status": "running", "elapsed_ms": polls["n"] * 1000}
                if polls["n"] <= 3
                else {"ok": True, "status": "completed", "stdout": "done\n", "job_id": "job-1"}
            )
        else:
            reply = {"ok": True, "status": "cancelled", "job_id": "job-1"}
        return 200, {}, json.dumps(reply).encode()

    with http_endpoint(answer) as endpoint:
        yield boto3.client("lambda", endpoint_url=endpoint), seen


def turn_of(client: Any) -> SandboxTurn:
    return SandboxTurn(
        "thinkwork-dev-dispatch",
        tenant_id="acme",
        agent_id="a1",
        template_id="analyst",
        turn_id="turn-1",
        lambda_client=client,
    )


def test_agent_jobs_submit_sends_background_and_timeout(fake_dispatch: Any) -> None:
    # Given a turn
    client, seen = fake_dispatch
    # When a job is submitted
    answer = turn_of(client).submit("import time; time.sleep(600)", timeout_s=1200)
    # Then the event is an execute_code with background and timeout_s, and the answer is at once
    assert (answer.status, answer.job_id, answer.running) == ("running", "job-1", True)
    event = seen[0]
    assert (event["action"], event["background"], event["timeout_s"]) == ("execute_code", True, 1200)
    assert event["code"] == "import time; time.sleep(600)" and event["call_id"].startswith("call-")


def test_agent_jobs_wait_reports_progress_until_final(fake_dispatch: Any) -> None:
    # Given a submitted job that runs for three polls
    client, seen = fake_dispatch
    turn = turn_of(client)
    progress: list[int] = []
    sleeps: list[float] = []
    # When the caller waits for it with a progress callback
    final = turn.wait(
        "job-1", progress=lambda r: progress.append(r.elapsed_ms), poll_seconds=2.0, sleep=sleeps.append
    )
    # Then each running answer reached the callback, and the final result is returned
    assert progress == [1000, 2000, 3000]
    assert sleeps == [2.0, 2.0, 2.0]
    assert (final.status, final.stdout, final.job_id) == ("completed", "done\n", "job-1")
    assert [e["action"] for e in seen] == ["get_job"] * 4
    assert seen[0] == {
        "action": "get_job",
        "tenant_id": "acme",
        "agent_id": "a1",
        "turn_id": "turn-1",
        "turn_token": turn.turn_token,
        "job_id": "job-1",
    }


def test_agent_jobs_cancel_sends_cancel_job(fake_dispatch: Any) -> None:
    # Given a turn, when a job is cancelled, then a cancel_job event names it
    client, seen = fake_dispatch
    turn = turn_of(client)
    answer = turn.cancel_job("job-1")
    assert answer.status == "cancelled"
    assert seen == [
        {
            "action": "cancel_job",
            "tenant_id": "acme",
            "agent_id": "a1",
            "turn_id": "turn-1",
            "turn_token": turn.turn_token,
            "job_id": "job-1",
        }
    ]
