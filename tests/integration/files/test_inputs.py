"""Files in: inline files through writeFiles into a real local session, and the in-session
S3 copy helper run against moto's S3 (the local stack has no execution role to give a session,
so the helper is executed here with moto credentials — the same source a session runs)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import boto3
import pytest
from dispatch.sessions.inputs import ANSWER_PATH, InputsFailed, copy_source, write_inputs
from sandbox_common.files import InputFile
from sandbox_runtime.runner.tools import SessionFiles

from tests.integration.files.conftest import ACME_CI, LocalCredentials
from tests.integration.interpreter._helpers import invoke, make_client


def inline(path: str, data: bytes) -> InputFile:
    return InputFile(path=path, content_base64=base64.b64encode(data).decode())


def test_write_inputs_places_inline_files_and_returns_records(files_interpreter, acme_session) -> None:
    # Given two inline inputs, one binary in a sub-directory
    tools = SessionFiles(
        tenant_id="acme",
        allowed_interpreter_ids=frozenset({ACME_CI}),
        credentials=LocalCredentials(files_interpreter.endpoint),
    )
    files = [inline("data/sales.csv", b"region,amount\neu,3\n"), inline("raw/x.bin", b"\x00\x01\xff")]
    # When written before the code runs
    records = write_inputs(tools, ACME_CI, acme_session, files)
    seen = invoke(
        make_client(files_interpreter.endpoint),
        ACME_CI,
        acme_session,
        "import hashlib\nfor p in ('data/sales.csv', 'raw/x.bin'):\n"
        "    print(p, hashlib.sha256(open(p, 'rb').read()).hexdigest())",
    )[0]
    # Then the code sees them at their relative paths, and the records are path, bytes, sha256
    assert records == [
        {
            "path": "data/sales.csv",
            "bytes": 19,
            "sha256": hashlib.sha256(b"region,amount\neu,3\n").hexdigest(),
        },
        {"path": "raw/x.bin", "bytes": 3, "sha256": hashlib.sha256(b"\x00\x01\xff").hexdigest()},
    ]
    assert seen["stdout"].splitlines() == [f"{r['path']} {r['sha256']}" for r in records]


def test_write_inputs_failure_is_inputs_failed(files_interpreter, acme_session) -> None:
    # Given a path the session cannot create (a file where a directory must be)
    tools = SessionFiles(
        tenant_id="acme",
        allowed_interpreter_ids=frozenset({ACME_CI}),
        credentials=LocalCredentials(files_interpreter.endpoint),
    )
    write_inputs(tools, ACME_CI, acme_session, [inline("blocker", b"x")])
    # When an input needs `blocker/` as a directory / Then InputsFailed (the code must not run)
    with pytest.raises(InputsFailed) as info:
        write_inputs(tools, ACME_CI, acme_session, [inline("blocker/a.csv", b"y")])
    assert info.value.reason.startswith("inputs:writeFiles_failed")


@pytest.fixture
def data_bucket(moto_endpoint: str) -> Any:
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="acme-data")
    return s3


def _run_helper(source: str, cwd: Path) -> None:
    previous = os.getcwd()
    os.chdir(cwd)
    try:
        exec(compile(source, "<helper>", "exec"), {"__name__": "__main__"})  # noqa: S102 - our own snippet
    finally:
        os.chdir(previous)


def test_copy_helper_copies_objects_and_records_sha256(data_bucket, tmp_path: Path) -> None:
    # Given an object under the tenant's prefix
    body = b"id,value\n" + b"1,2\n" * 1000
    data_bucket.put_object(Bucket="acme-data", Key="in/2026/sales.csv", Body=body)
    # When the helper a session runs copies it
    _run_helper(copy_source([("data/sales.csv", "acme-data", "in/2026/sales.csv")]), tmp_path)
    # Then the file is at its path and the answer records its bytes and sha256
    assert (tmp_path / "data/sales.csv").read_bytes() == body
    assert json.loads((tmp_path / ANSWER_PATH).read_text()) == [
        {"path": "data/sales.csv", "bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    ]


def test_copy_helper_refuses_object_over_the_limit_before_downloading(data_bucket, tmp_path: Path) -> None:
    # Given an object one byte over the (lowered) limit
    data_bucket.put_object(Bucket="acme-data", Key="in/big.bin", Body=b"x" * 101)
    # When the helper runs / Then it fails and nothing was written
    with pytest.raises(ValueError, match="over the 100-byte limit"):
        _run_helper(copy_source([("big.bin", "acme-data", "in/big.bin")], max_bytes=100), tmp_path)
    assert not (tmp_path / "big.bin").exists()


def test_copy_helper_answers_the_s3_error_code_of_an_object_it_may_not_read(
    data_bucket, tmp_path: Path
) -> None:
    # Given no object at the key
    # When the helper runs / Then its answer names S3's refusal (the call fails as inputs:s3:<code>)
    _run_helper(copy_source([("x.csv", "acme-data", "in/missing.csv")]), tmp_path)
    assert json.loads((tmp_path / ANSWER_PATH).read_text()) == {"error": "NoSuchKey"}
    assert not (tmp_path / "x.csv").exists()
