"""`sandboxctl` for audit rows, counters, findings, files and background jobs: the real CLI, each command a
process of its own (`ctl`, tests/support/ctl_server.py), against the module's local stack
(tests/cli/conftest.py)."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sandbox_common import naming as n

from tests.support.local_stack import assert_one_line_failure, ctl, ctl_json, state_of

_state = state_of


# --- audit -----------------------------------------------------------------------------------
def _row(tenant: str, agent: str, session: str, started: str, **extra: Any) -> dict[str, Any]:
    return {
        "invocation_id": str(uuid.uuid4()),
        "tenant_id": tenant,
        "agent_id": agent,
        "user_id": "u-1",
        "template_id": "analyst",
        "turn_id": "t-1",
        "call_id": f"c-{uuid.uuid4().hex[:6]}",
        "session_id": session,
        "environment": "default-public",
        "invocation_source": "chat",
        "started_at": started,
        "finished_at": started,
        "duration_ms": 12,
        "exit_status": "ok",
        "exit_code": 0,
        "error": None,
        "failure_reason": None,
        "stdout_bytes": 2,
        "stderr_bytes": 0,
        "stdout_truncated": False,
        "stderr_truncated": False,
        "executed_code_hash": hashlib.sha256(b"print(1)").hexdigest(),
        "expires_at": 1_900_000_000,
        **extra,
    }


def test_audit_replay_is_exactly_once_and_list_filters(cli_env: dict[str, str]) -> None:
    # Given three rows in the DLQ, one of them twice, and one row whose original write had succeeded
    state = _state(cli_env)
    sqs, ddb = state.client("sqs"), state.client("dynamodb")
    queue = state.resources.audit_dlq_url
    a = _row("globex", "agent-a", "sess-1", "2026-01-02T10:00:00.000Z")
    b = _row("globex", "agent-b", "sess-2", "2026-01-02T11:00:00.000Z")
    c = _row("globex", "agent-a", "sess-1", "2026-01-02T12:00:00.000Z", stdout_truncated=True)
    ddb.put_item(
        TableName=n.INVOCATIONS.physical("local"),
        Item={
            "invocation_id": {"S": c["invocation_id"]},
            "tenant_id": {"S": "globex"},
            "marker": {"S": "orig"},
        },
    )
    for row in (a, b, a, c):
        sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(row))
    # When the DLQ is replayed
    counts = ctl_json(cli_env, "audit", "replay")
    # Then a and b are written once, the second a and c are duplicates, and the queue is empty
    assert counts == {"replayed": 2, "duplicates": 2, "invalid": 0, "failed": 0}
    attrs = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert (
        attrs["ApproximateNumberOfMessages"] == "0" and attrs["ApproximateNumberOfMessagesNotVisible"] == "0"
    )
    original = ddb.get_item(
        TableName=n.INVOCATIONS.physical("local"), Key={"invocation_id": {"S": c["invocation_id"]}}
    )
    assert original["Item"]["marker"] == {"S": "orig"}  # never overwritten
    # and the rows keep their types (real booleans, numbers)
    rows = ctl_json(cli_env, "audit", "list", "--tenant", "globex", "--agent", "agent-a")
    assert [r["invocation_id"] for r in rows] == [a["invocation_id"]]  # c is the original, without agent_id
    assert rows[0]["stdout_truncated"] is False and rows[0]["duration_ms"] == 12
    # and the list filters by session, time and limit, newest first
    assert [
        r["invocation_id"]
        for r in ctl_json(cli_env, "audit", "list", "--tenant", "globex", "--session", "sess-2")
    ] == [b["invocation_id"]]
    assert (
        ctl_json(cli_env, "audit", "list", "--tenant", "globex", "--session", "sess-2", "--agent", "x") == []
    )
    assert (
        ctl_json(cli_env, "audit", "list", "--tenant", "acme", "--session", "sess-2") == []
    )  # other tenant's session
    since = ctl_json(cli_env, "audit", "list", "--tenant", "globex", "--since", "2026-01-02T10:30:00Z")
    assert [r["invocation_id"] for r in since if r["started_at"].startswith("2026-01-02")] == [
        b["invocation_id"]
    ]
    newest = ctl_json(
        cli_env, "audit", "list", "--tenant", "globex", "--since", "2026-01-02T00:00:00Z", "--limit", "1"
    )
    assert len(newest) == 1 and newest[0]["started_at"] >= b["started_at"]


def test_audit_replay_keeps_messages_that_are_not_rows(cli_env: dict[str, str]) -> None:
    # Given a message that is not an audit row
    state = _state(cli_env)
    sqs = state.client("sqs")
    sqs.send_message(QueueUrl=state.resources.audit_dlq_url, MessageBody="not json")
    # When the DLQ is replayed
    out = ctl(cli_env, "--json", "audit", "replay")
    # Then the command fails (exit 1, one line) and the message is still in the queue
    assert_one_line_failure(out, 1, "not audit rows")
    assert json.loads(out.stdout)["invalid"] == 1
    attrs = sqs.get_queue_attributes(QueueUrl=state.resources.audit_dlq_url, AttributeNames=["All"])[
        "Attributes"
    ]
    assert (
        int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"]) == 1
    )
    sqs.purge_queue(QueueUrl=state.resources.audit_dlq_url)


def test_audit_replay_drains_the_local_spool_through_the_writer(cli_env: dict[str, str]) -> None:
    # Given two rows the dispatch worker spooled while the emulated AWS was down (same row twice)
    state = _state(cli_env)
    row = _row("acme", "agent-spool", "sess-spool", "2026-01-03T10:00:00.000Z")
    spool = state.directory / n.LOCAL_AUDIT_SPOOL_FILE
    spool.write_text((json.dumps(row) + "\n") * 2)
    # When the audit trail is replayed
    counts = ctl_json(cli_env, "audit", "replay")
    # Then the row is written once (the second line is a duplicate) and the spool is empty
    assert counts == {"replayed": 1, "duplicates": 1, "invalid": 0, "failed": 0}
    assert spool.read_text() == ""
    (listed,) = ctl_json(cli_env, "audit", "list", "--tenant", "acme", "--session", "sess-spool")
    assert listed["invocation_id"] == row["invocation_id"] and listed["stdout_truncated"] is False


# --- counters and findings -------------------------------------------------------------------
def test_counters_show_reads_the_quota_functions_counters(cli_env: dict[str, str]) -> None:
    # Given three admitted calls through the real quota function (via the Lambda emulator)
    lam = _state(cli_env).client("lambda")
    for _attempt in range(2):  # calls and reads inside one hour: the count is the hour's
        hour = time.strftime("%Y-%m-%dT%H", time.gmtime())
        agent = f"ctr-{uuid.uuid4().hex[:6]}"
        for _ in range(3):
            out = lam.invoke(
                FunctionName=n.function_name("local", n.QUOTA_CHECK),
                Payload=json.dumps({"tenant_id": "acme", "agent_id": agent}).encode(),
            )
            assert json.loads(out["Payload"].read())["ok"] is True
        # When the counters are shown
        one = ctl_json(cli_env, "counters", "show", "--tenant", "acme", "--agent", agent)
        every = ctl_json(cli_env, "counters", "show", "--tenant", "acme")
        if time.strftime("%Y-%m-%dT%H", time.gmtime()) == hour:
            break
    # Then the agent's current hour shows 3 against its cap, and the tenant's day at least 3
    assert one["agent_hourly"] == [
        {"agent_id": agent, "window": one["agent_hourly"][0]["window"], "count": 3, "cap": 100}
    ]
    assert one["tenant_daily"]["count"] >= 3 and one["tenant_daily"]["cap"] == 1000
    assert one["tenant_daily"]["resets_at"].endswith("T00:00:00Z") and one["agent_hourly_resets_at"].endswith(
        ":00:00Z"
    )
    assert agent in {a["agent_id"] for a in every["agent_hourly"]}


def test_findings_list_honours_since(cli_env: dict[str, str]) -> None:
    # Given two findings, one now and one three days ago
    ddb = _state(cli_env).client("dynamodb")
    now = datetime.now(UTC)
    for moment, event in ((now, "ev-now"), (now - timedelta(days=3), "ev-old")):
        iso = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
        ddb.put_item(
            TableName=n.FINDINGS.physical("local"),
            Item={
                "finding_date": {"S": moment.strftime("%Y-%m-%d")},
                "finding_key": {"S": f"{iso}#{event}#0"},
                "timestamp": {"S": iso},
                "token_class": {"S": "github_pat"},
                "event_id": {"S": event},
                "log_group": {"S": n.log_group_name("local", n.DISPATCH)},
                "fingerprint": {"S": "ab12cd34"},
            },
        )
    # When findings are listed by default and since four days ago
    recent = ctl_json(cli_env, "findings", "list")
    week = ctl_json(
        cli_env, "findings", "list", "--since", (now - timedelta(days=4)).strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    # Then the default window holds only the recent one, the longer one both (newest first)
    assert [f["event_id"] for f in recent] == ["ev-now"]
    assert [f["event_id"] for f in week] == ["ev-now", "ev-old"]
    human = ctl(cli_env, "findings", "list")
    assert human.returncode == 0 and "github_pat" in human.stdout and "TOKEN_CLASS" in human.stdout


# --- files ----------------------------------------------------------------
def _put_artifact(env: dict[str, str], tenant: str, turn: str, data: bytes) -> dict[str, Any]:
    from sandbox_runtime.artifacts import ArtifactContext, ArtifactStore

    state = _state(env)
    ctx = ArtifactContext(
        tenant_id=tenant,
        turn_id=turn,
        invocation_id=f"inv-{uuid.uuid4().hex[:8]}",
        bucket=state.resources.artifacts_bucket,
    )
    return ArtifactStore(state.client("s3")).put(ctx, "summary.csv", data, redacted=False)


def test_local_status_lists_interpreter_ids(cli_env: dict[str, str]) -> None:
    # Given the running stack / When its status is read / Then every configured interpreter id is listed
    status = ctl_json(cli_env, "local", "status")
    expected = sorted(i["id"] for i in _state(cli_env).resources.interpreters)
    assert sorted(status["interpreters"]) == expected and expected
    human = ctl(cli_env, "local", "status")
    assert all(i in human.stdout for i in expected)


def test_files_list_and_get_verify_sha256(cli_env: dict[str, str], tmp_path: Path) -> None:
    # Given two acme artifacts in two turns and one globex artifact
    turn = f"turn-{uuid.uuid4().hex[:8]}"
    mine = _put_artifact(cli_env, "acme", turn, b"region,total\neu,3\n")
    _put_artifact(cli_env, "acme", f"{turn}-other", b"x")
    theirs = _put_artifact(cli_env, "globex", turn, b"secret,1\n")
    # When listed for the turn and fetched
    listed = ctl_json(cli_env, "files", "list", "--tenant", "acme", "--turn", turn)
    target = tmp_path / "summary.csv"
    got = ctl_json(cli_env, "files", "get", mine["file_id"], "--tenant", "acme", "-o", str(target))
    # Then the listing has exactly that turn's file and the bytes on disk match its sha256
    assert [f["file_id"] for f in listed] == [mine["file_id"]]
    assert target.read_bytes() == b"region,total\neu,3\n"
    assert got["sha256"] == hashlib.sha256(target.read_bytes()).hexdigest() == mine["sha256"]
    # And another tenant's file_id is not found for acme, nothing written
    foreign = tmp_path / "foreign.csv"
    out = ctl(cli_env, "files", "get", theirs["file_id"], "--tenant", "acme", "-o", str(foreign))
    assert_one_line_failure(out, 1, "no file")
    assert not foreign.exists()


def test_files_get_refuses_bytes_that_do_not_match(cli_env: dict[str, str], tmp_path: Path) -> None:
    # Given an artifact whose stored object was changed after its sha256 was recorded
    entry = _put_artifact(cli_env, "acme", f"turn-{uuid.uuid4().hex[:8]}", b"original")
    state = _state(cli_env)
    pointer = json.loads(
        state.client("s3")
        .get_object(
            Bucket=state.resources.artifacts_bucket, Key=n.file_pointer_key("acme", entry["file_id"])
        )["Body"]
        .read()
    )
    state.client("s3").put_object(
        Bucket=state.resources.artifacts_bucket, Key=pointer["key"], Body=b"tampered"
    )
    # When fetched / Then refused with one line, and nothing at the path
    target = tmp_path / "x.csv"
    out = ctl(cli_env, "files", "get", entry["file_id"], "--tenant", "acme", "-o", str(target))
    assert_one_line_failure(out, 1, "sha256")
    assert not target.exists() and not Path(f"{target}.partial").exists()


# --- background jobs ----------------------------------------------------------------
def test_jobs_list_filters_by_tenant_newest_first(cli_env: dict[str, str]) -> None:
    from sandbox_runtime.job_store import JobRecord, JobStore

    # Given jobs of two tenants in the local stack's jobs table, one of them ended
    state = _state(cli_env)
    store = JobStore(table_name=n.JOBS.physical("local"), ddb=state.client("dynamodb"))

    def job(job_id: str, tenant: str, submitted_ms: int) -> JobRecord:
        return JobRecord(
            job_id=job_id,
            tenant_id=tenant,
            agent_id="agent-1",
            turn_id=f"turn-{job_id}",
            session_id="S1",
            interpreter_id="sbx",
            invocation_id=f"inv-{job_id}",
            call_id="c",
            timeout_s=900,
            submitted_ms=submitted_ms,
        )

    old, new, other = (
        job("cli-old", "acme", 1_700_000_000_000),
        job("cli-new", "acme", 1_700_000_060_000),
        job("cli-other", "globex", 1_700_000_030_000),
    )
    for record in (old, new, other):
        store.create(record)
    store.mark_final(store.claim_end(old, final_state="completed", outcome={"response": {"ok": True}}))
    # When jobs are listed for acme, and for everyone
    acme = ctl_json(cli_env, "jobs", "list", "--tenant", "acme")
    everyone = ctl_json(cli_env, "jobs", "list")
    human = ctl(cli_env, "jobs", "list", "--tenant", "acme")
    # Then acme's jobs only, newest first, with their status; everyone's include globex
    assert [(r["job_id"], r["status"]) for r in acme] == [("cli-new", "running"), ("cli-old", "completed")]
    assert {"cli-old", "cli-new", "cli-other"} <= {r["job_id"] for r in everyone}
    assert human.returncode == 0 and "cli-new" in human.stdout and "cli-other" not in human.stdout
