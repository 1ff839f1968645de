"""Files in and artifacts out end to end through dispatch on the shared local stack.

Input files written before the code (inline, and copied from the emulated S3 under the tenant's
grant), artifacts collected after it into the artifacts bucket,
`files` in the response, audit `input_files`/`artifacts`, `get_file` tenant-scoped, bad files
refused before anything counts, nothing collected after a timeout.
"""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from dispatch.sessions.inputs import INPUTS_FAILED_MESSAGE
from sandbox_common import aws, limits
from sandbox_common import naming as n

from infra.local.interpreter import LocalInterpreterServer
from tests.support.stack import close_stack, open_stack

from .conftest import Stack, event

SESSION_PYTHON = Path(__file__).resolve().parents[3] / n.SESSION_VENV_DIR / "bin" / "python"

CSV = b"region,amount\neu,3\nus,4\neu,5\n"
CODE = (
    "import csv, collections, os\n"
    "totals = collections.Counter()\n"
    "for row in csv.DictReader(open('data/sales.csv')):\n"
    "    totals[row['region']] += int(row['amount'])\n"
    "os.makedirs('outputs', exist_ok=True)\n"
    "with open('outputs/summary.csv', 'w') as fh:\n"
    "    fh.write('region,total\\n' + ''.join(f'{k},{v}\\n' for k, v in sorted(totals.items())))\n"
    "print(dict(totals))\n"
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def counted(stack: Stack) -> int:
    return sum(
        int(i[n.COUNTER_ATTR_COUNT]["N"]) for i in stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical]
    )


def test_file_in_summary_out_downloaded_with_matching_sha256(stack: Stack) -> None:
    # Given a CSV sent inline with the call
    result = stack.dispatch(event(code=CODE, files=[{"path": "data/sales.csv", "content_base64": b64(CSV)}]))
    # Then the code saw it at its relative path and the summary came back as an artifact
    assert result["ok"] is True, result
    assert result["stdout"] == "{'eu': 8, 'us': 4}\n"
    (summary,) = result["files"]
    assert summary["filename"] == "summary.csv" and summary["content_type"] == "text/csv"
    assert sorted(summary) == ["bytes", "content_type", "created_at", "file_id", "filename", "sha256"]
    # And get_file answers a URL that downloads exactly those bytes
    got = stack.dispatch({"action": "get_file", "tenant_id": "acme", "file_id": summary["file_id"]})
    assert got["ok"] is True and got["sha256"] == summary["sha256"]
    with urllib.request.urlopen(got["url"]) as response:
        body = response.read()
    assert body == b"region,total\neu,8\nus,4\n"
    assert hashlib.sha256(body).hexdigest() == summary["sha256"]
    # And the audit row records the input file and the artifact
    (row,) = stack.audit_rows("acme")
    assert row["input_files"] == [
        {"path": "data/sales.csv", "bytes": len(CSV), "sha256": hashlib.sha256(CSV).hexdigest()}
    ]
    assert row["artifacts"] == [{k: summary[k] for k in ("file_id", "filename", "bytes", "sha256")}]


def test_call_without_artifacts_answers_empty_files(stack: Stack) -> None:
    result = stack.dispatch(event(code="print(1)"))
    assert result["ok"] is True and result["files"] == []


def test_bad_files_are_refused_before_anything_counts(stack: Stack) -> None:
    # Given the counters and the interpreter's sessions before
    before, sessions = counted(stack), stack.live_sessions()
    bad = [
        [{"path": "../etc/passwd", "content_base64": b64(b"x")}],
        [{"path": "/abs", "content_base64": b64(b"x")}],
        [{"path": "a\u0000b", "content_base64": b64(b"x")}],
        [{"path": f"f{i}", "content_base64": b64(b"x")} for i in range(21)],
        [{"path": "big", "content_base64": b64(b"\0" * (limits.MAX_INLINE_INPUT_BYTES + 1))}],
        [{"path": "x", "content_base64": "%%%"}],
        [{"path": "x", "s3_uri": "s3://someone-elses-bucket/data.csv"}],
        [{"path": "x", "s3_uri": f"s3://{n.demo_data_bucket_name('local')}/globex/data.csv"}],
        [{"path": "x", "s3_uri": f"s3://{n.demo_data_bucket_name('local')}/acme/../globex/data.csv"}],
        [{"path": "x", "s3_uri": f"s3://{n.demo_data_bucket_name('local')}/acme/%2e%2e/globex/data.csv"}],
    ]
    # When each is sent / Then each is SandboxInvalidRequest, nothing counted, no session, no audit row
    for i, files in enumerate(bad):
        answer = stack.dispatch(event(call_id=f"bad-{i}", code="print(1)", files=files))
        assert answer["ok"] is False and answer["error"] == "SandboxInvalidRequest", (i, answer)
    assert len(bad) == 10
    assert counted(stack) == before
    assert stack.live_sessions() == sessions
    assert stack.audit_rows("acme") == []


def test_get_file_of_another_tenant_is_the_same_answer_as_unknown(stack: Stack) -> None:
    # Given an acme artifact
    made = stack.dispatch(
        event(code="import os\nos.makedirs('outputs', exist_ok=True)\nopen('outputs/x.txt','w').write('x')")
    )
    file_id = made["files"][0]["file_id"]
    # When globex asks for it, and acme for an id that never existed
    foreign = stack.dispatch({"action": "get_file", "tenant_id": "globex", "file_id": file_id})
    unknown = stack.dispatch({"action": "get_file", "tenant_id": "acme", "file_id": "file-" + "A" * 24})
    # Then both are the same SandboxInvalidRequest
    assert foreign == unknown and foreign["error"] == "SandboxInvalidRequest"


def test_token_in_text_artifact_is_redacted_in_the_stored_object(stack: Stack) -> None:
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    made = stack.dispatch(
        event(
            code=(
                "import os\nos.makedirs('outputs',"
                f" exist_ok=True)\nopen('outputs/t.txt','w').write('t={token}')"
            )
        )
    )
    (entry,) = made["files"]
    key = n.artifact_key("acme", "turn-1", made["invocation_id"], "t.txt")
    stored = aws.client("s3").get_object(Bucket=stack.resources.artifacts_bucket, Key=key)["Body"].read()
    assert token.encode() not in stored and b"<redacted>" in stored
    assert hashlib.sha256(stored).hexdigest() == entry["sha256"]


def test_token_shaped_artifact_name_never_reaches_response_row_log_or_key(
    stack: Stack, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Given code that names an artifact after a token, next to one already called redacted.txt
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    made = stack.dispatch(
        event(
            code=(
                "import os\nos.makedirs('outputs', exist_ok=True)\n"
                f"open('outputs/{token}.txt','w').write('one')\n"
                "open('outputs/redacted.txt','w').write('two')\n"
            )
        )
    )
    # When it ran through dispatch
    assert made["ok"] is True, made
    # Then the token-shaped name is replaced, without landing on the other artifact's name
    by_name = {f["filename"]: f for f in made["files"]}
    assert sorted(by_name) == ["redacted-2.txt", "redacted.txt"]
    assert by_name["redacted-2.txt"]["content_type"] == "text/plain"
    # And the token is nowhere: response, audit row, anything logged, any S3 key
    s3 = aws.client("s3")
    keys = [
        o["Key"]
        for o in s3.list_objects_v2(Bucket=stack.resources.artifacts_bucket, Prefix="acme/").get(
            "Contents", []
        )
    ]
    printed = capfd.readouterr()
    records = json.dumps([{**vars(r), "msg": r.getMessage()} for r in caplog.records], default=str)
    for where, text in (
        ("response", json.dumps(made)),
        ("audit", json.dumps(stack.audit_rows("acme"), default=str)),
        ("stdout", printed.out),
        ("stderr", printed.err),
        ("log records", records),
        ("keys", json.dumps(keys)),
    ):
        assert token not in text, f"token leaked into {where}"
    # And each object is at its redacted name's key, holding its own bytes
    for name, body in (("redacted-2.txt", b"one"), ("redacted.txt", b"two")):
        key = n.artifact_key("acme", "turn-1", made["invocation_id"], name)
        assert s3.get_object(Bucket=stack.resources.artifacts_bucket, Key=key)["Body"].read() == body


def test_timeout_collects_no_artifacts(stack: Stack, monkeypatch) -> None:
    from dispatch import parts as dependencies
    from sandbox_common import settings

    monkeypatch.setenv(n.ENV_CALL_TIMEOUT, "2")
    settings.clear_caches()
    dependencies.reset()
    result = stack.dispatch(
        event(
            code=(
                "import os, time\nos.makedirs('outputs', exist_ok=True)\n"
                "open('outputs/late.txt','w').write('x')\ntime.sleep(30)"
            )
        )
    )
    assert result["exit_status"] == "timeout"
    assert result["files"] == []
    keys = aws.client("s3").list_objects_v2(Bucket=stack.resources.artifacts_bucket).get("Contents", [])
    assert keys == []


@pytest.fixture(scope="module")
def runtime_interpreter() -> Iterator[LocalInterpreterServer]:
    """The interpreter as `sandboxctl local up` runs it: sessions on the session runtime."""
    assert SESSION_PYTHON.exists(), "the session runtime is missing: run `make session-runtime`"
    server = LocalInterpreterServer(python=str(SESSION_PYTHON)).start()
    yield server
    server.stop()


@pytest.fixture
def runtime_stack(
    moto_endpoint: str, runtime_interpreter: LocalInterpreterServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Stack]:
    stack = open_stack(moto_endpoint, runtime_interpreter, monkeypatch.setenv)
    yield stack
    close_stack(stack)


def test_s3_input_under_the_tenants_prefix_is_copied_in_and_read(runtime_stack: Stack) -> None:
    # Given a CSV in the emulated S3 under acme's data.read prefix
    stack = runtime_stack
    bucket = n.demo_data_bucket_name("local")
    aws.client("s3").put_object(Bucket=bucket, Key="acme/2026/sales.csv", Body=CSV)
    before = counted(stack)
    # When execute_code names it as an s3_uri and reads it with pandas
    code = "import pandas as pd\ndf = pd.read_csv('data/sales.csv')\nprint(int(df['amount'].sum()))\n"
    files = [{"path": "data/sales.csv", "s3_uri": f"s3://{bucket}/acme/2026/sales.csv"}]
    result = stack.dispatch(event(code=code, files=files))
    # Then the code ran on the copied file, and the call was counted once and audited with its input
    assert result["ok"] is True, result
    assert result["stdout"] == "12\n"
    assert counted(stack) == before + 1
    (row,) = stack.audit_rows("acme")
    assert row["input_files"] == [
        {"path": "data/sales.csv", "bytes": len(CSV), "sha256": hashlib.sha256(CSV).hexdigest()}
    ]


def test_s3_input_of_another_tenant_past_a_wrong_data_read_is_refused_in_the_session(
    runtime_stack: Stack,
) -> None:
    # Given acme's configuration wrongly naming globex's folder as readable (the dispatch-side check
    # then passes), while acme's role grants only its own folder, and an object of globex's there
    stack = runtime_stack
    bucket = n.demo_data_bucket_name("local")
    aws.client("s3").put_object(Bucket=bucket, Key="globex/secret.csv", Body=b"globex-only\n")
    ssm = aws.client("ssm")
    name = n.tenant_substrate_parameter("local", "acme")
    substrate = json.loads(ssm.get_parameter(Name=name)["Parameter"]["Value"])
    substrate["data_read"] = [*substrate["data_read"], f"s3://{bucket}/globex/"]
    ssm.put_parameter(Name=name, Value=json.dumps(substrate), Type="String", Overwrite=True)
    before = counted(stack)
    # When acme sends globex's object as an s3_uri
    files = [{"path": "data/x.csv", "s3_uri": f"s3://{bucket}/globex/secret.csv"}]
    result = stack.dispatch(event(code="print(open('data/x.csv').read())", files=files))
    # Then the copy in the session is refused as the role refuses it: a named error, no code run,
    # counted once, one audit row saying why
    assert result["ok"] is False and result["error"] == "SandboxError", result
    assert result["error_message"] == INPUTS_FAILED_MESSAGE
    assert "globex-only" not in json.dumps(result)
    assert counted(stack) == before + 1
    (row,) = stack.audit_rows("acme")
    assert row["failure_reason"] == "inputs:s3:AccessDenied"
    assert "globex-only" not in json.dumps(row, default=str)
