"""SPEC §14 end to end through dispatch on the shared local stack.

Input files written before the code, artifacts collected after it into the artifacts bucket,
`files` in the response, audit `input_files`/`artifacts`, `get_file` tenant-scoped, bad files
refused before anything counts, nothing collected after a timeout.
"""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.request

import pytest
from sandbox_common import aws, limits
from sandbox_common import naming as n

from .conftest import Stack, event

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


def test_s3_input_under_the_tenants_prefix_passes_the_check_and_fails_placement_locally(stack: Stack) -> None:
    # Given an s3 input under acme's data.read prefix (docs/local-stack.md: locally the in-session copy has
    # neither the execution role's credentials nor a route to the emulated S3)
    uri = f"s3://{n.demo_data_bucket_name('local')}/acme/sales.csv"
    before = counted(stack)
    # When it is sent with code that would leave a mark
    result = stack.dispatch(event(code="print('ran')", files=[{"path": "data/sales.csv", "s3_uri": uri}]))
    # Then it was not refused as a bad request (the prefix is the tenant's): it was counted, then
    # placing it failed, so no code ran, and the audit row says why
    assert result["ok"] is False and result["error"] == "SandboxError", result
    assert result.get("stdout", "") == ""
    assert counted(stack) == before + 1
    (row,) = stack.audit_rows("acme")
    assert str(row["failure_reason"]).startswith("inputs:")
