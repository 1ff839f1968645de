"""`get_file` against moto's S3: tenant-scoped lookup, presigned URL that works and expires."""

from __future__ import annotations

import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from dispatch.files.access import get_file
from sandbox_common import limits
from sandbox_common.errors import SandboxInvalidRequest
from sandbox_common.files import GetFileRequest
from sandbox_common.files import list_pointers as list_files
from sandbox_runtime.artifacts import ArtifactContext, ArtifactStore, new_file_id

from tests.integration.files.conftest import BUCKET

DATA = b"region,total\neu,3\n"


def put(s3: Any, tenant: str = "acme", turn: str = "turn-1") -> dict[str, Any]:
    ctx = ArtifactContext(tenant_id=tenant, turn_id=turn, invocation_id="inv-1", bucket=BUCKET)
    return ArtifactStore(s3).put(ctx, "summary.csv", DATA, redacted=False)


def request(tenant: str, file_id: str) -> GetFileRequest:
    return GetFileRequest(action="get_file", tenant_id=tenant, file_id=file_id)


def test_get_file_answers_metadata_and_a_working_url(s3) -> None:
    # Given an acme artifact
    entry = put(s3)
    # When acme asks for it
    answer = get_file(request("acme", entry["file_id"]), s3=s3, bucket=BUCKET)
    # Then the metadata is the stored one and the URL downloads the bytes
    assert answer["ok"] is True
    assert {k: answer[k] for k in ("file_id", "filename", "bytes", "content_type", "sha256")} == {
        k: entry[k] for k in ("file_id", "filename", "bytes", "content_type", "sha256")
    }
    assert f"X-Amz-Expires={limits.PRESIGNED_URL_SECONDS}" in answer["url"]
    with urllib.request.urlopen(answer["url"]) as response:
        assert response.read() == DATA


def test_get_file_of_another_tenant_answers_like_an_unknown_id(s3) -> None:
    # Given an acme artifact
    entry = put(s3)
    # When globex asks for acme's file_id, and acme asks for an id that never existed
    with pytest.raises(SandboxInvalidRequest) as foreign:
        get_file(request("globex", entry["file_id"]), s3=s3, bucket=BUCKET)
    with pytest.raises(SandboxInvalidRequest) as unknown:
        get_file(request("acme", new_file_id()), s3=s3, bucket=BUCKET)
    # Then both answers are the same, word for word
    assert foreign.value.to_response() == unknown.value.to_response()


def test_presigned_url_expires_within_15_minutes_of_signing(s3) -> None:
    # Given a fresh get_file answer
    entry = put(s3)
    before = datetime.now(UTC).replace(microsecond=0)
    answer = get_file(request("acme", entry["file_id"]), s3=s3, bucket=BUCKET)
    # When its SigV4 query is read
    query = parse_qs(urlsplit(answer["url"]).query)
    signed_at = datetime.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    # Then it was signed now and stops being valid at most 15 minutes later. (moto does not
    # enforce presigned expiry, so S3's refusal after that is AWS's documented behaviour.)
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert before - timedelta(seconds=5) <= signed_at <= datetime.now(UTC) + timedelta(seconds=5)
    assert int(query["X-Amz-Expires"][0]) == limits.PRESIGNED_URL_SECONDS == 900


def test_get_file_never_signs_for_longer_than_15_minutes(s3) -> None:
    entry = put(s3)
    with pytest.raises(ValueError):
        get_file(
            request("acme", entry["file_id"]),
            s3=s3,
            bucket=BUCKET,
            expires_seconds=limits.PRESIGNED_URL_SECONDS + 1,
        )


def test_list_files_is_per_tenant_and_per_turn(s3) -> None:
    # Given artifacts of two acme turns and one globex turn
    a1, a2, g1 = put(s3, "acme", "turn-1"), put(s3, "acme", "turn-2"), put(s3, "globex", "turn-1")
    # When listed
    acme_all = {p["file_id"] for p in list_files(s3, BUCKET, "acme")}
    acme_t2 = {p["file_id"] for p in list_files(s3, BUCKET, "acme", "turn-2")}
    # Then each listing has exactly its own
    assert acme_all == {a1["file_id"], a2["file_id"]}
    assert acme_t2 == {a2["file_id"]}
    assert {p["file_id"] for p in list_files(s3, BUCKET, "globex")} == {g1["file_id"]}
