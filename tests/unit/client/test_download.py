"""Agent client `turn.download(file_id, path)` against a real HTTP endpoint speaking the
Lambda Invoke API whose get_file answers come from dispatch's get_file on moto's S3."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from dispatch.files.access import get_file
from sandbox_client.turn import ArtifactMismatch, ArtifactUnavailable, SandboxTurn
from sandbox_common.errors import SandboxInvalidRequest
from sandbox_common.files import GetFileRequest
from sandbox_runtime.artifacts import ArtifactContext, ArtifactStore

from tests.support.http import http_endpoint

BUCKET = "thinkwork-test-artifacts"


@pytest.fixture
def s3(moto_endpoint: str) -> Any:
    client = boto3.client("s3", region_name="us-east-1", config=Config(signature_version="s3v4"))
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
def turn(s3: Any) -> Any:
    def answer(path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        event = json.loads(body)
        try:
            reply = get_file(GetFileRequest.model_validate(event), s3=s3, bucket=BUCKET)
        except SandboxInvalidRequest as exc:
            reply = exc.to_response()
        return 200, {}, json.dumps(reply).encode()

    with http_endpoint(answer) as endpoint:
        yield SandboxTurn(
            "thinkwork-dev-dispatch",
            tenant_id="acme",
            agent_id="a1",
            template_id="analyst",
            turn_id="turn-1",
            lambda_client=boto3.client("lambda", endpoint_url=endpoint),
        )


def _artifact(s3: Any, data: bytes) -> dict[str, Any]:
    ctx = ArtifactContext(tenant_id="acme", turn_id="turn-1", invocation_id="inv-1", bucket=BUCKET)
    return ArtifactStore(s3).put(ctx, "summary.csv", data, redacted=False)


def test_download_writes_the_artifact_bytes(turn: Any, s3: Any, tmp_path: Path) -> None:
    # Given a stored artifact / When the agent downloads it
    entry = _artifact(s3, b"region,total\neu,8\n")
    answer = turn.download(entry["file_id"], str(tmp_path / "summary.csv"))
    # Then the file holds exactly its bytes
    assert (tmp_path / "summary.csv").read_bytes() == b"region,total\neu,8\n"
    assert answer["sha256"] == entry["sha256"]


def test_download_refuses_bytes_that_do_not_match(turn: Any, s3: Any, tmp_path: Path) -> None:
    # Given an artifact whose object changed after it was recorded
    entry = _artifact(s3, b"original")
    s3.put_object(Bucket=BUCKET, Key="acme/turn-1/inv-1/summary.csv", Body=b"tampered")
    # When downloaded / Then ArtifactMismatch and nothing at the path
    with pytest.raises(ArtifactMismatch):
        turn.download(entry["file_id"], str(tmp_path / "x.csv"))
    assert list(tmp_path.iterdir()) == []


def test_download_of_unknown_file_raises_unavailable(turn: Any, tmp_path: Path) -> None:
    with pytest.raises(ArtifactUnavailable):
        turn.download("file-" + "A" * 24, str(tmp_path / "x.csv"))
    assert list(tmp_path.iterdir()) == []
