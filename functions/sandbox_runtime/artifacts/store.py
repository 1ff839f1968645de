"""Artifacts in S3: each object at its key under the call's tenant, turn and invocation, then the
tenant-scoped pointer its file_id resolves through (`sandbox_common.files`); the names they are
listed, audited and stored under; the artifacts' S3 client."""

from __future__ import annotations

import functools
import hashlib
import json
import mimetypes
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sandbox_common import aws
from sandbox_common import naming as n
from sandbox_common.files import check_relative_path
from sandbox_common.redaction import catalogue


@dataclass(frozen=True)
class ArtifactContext:
    tenant_id: str
    turn_id: str
    invocation_id: str
    bucket: str


@dataclass(frozen=True)
class CollectResult:
    files: list[dict[str, Any]]  # response `files` (stored and skipped entries)
    artifacts: list[dict[str, Any]]  # audit `artifacts` (stored ones: file_id, filename, bytes, sha256)
    failure_reason: str | None = None  # collection failed (the call's own result stands)


# What a token shape in an artifact's name becomes: plain letters, because the name is also the
# S3 key's last part and the file name a download is saved under (no `<` `>` there).
REDACTED_NAME = "redacted"


def safe_filename(filename: str, taken: set[str]) -> str:
    """The name an artifact is listed, audited, logged and stored under: `filename` with every
    catalogue token shape replaced by REDACTED_NAME. A replaced name that another
    artifact of the call already has, or that is no longer a relative file path, gets a number
    (`redacted-2.txt`), so two redacted names never share one S3 key. Adds the result to `taken`."""
    cleaned = catalogue.redact(filename).replace(catalogue.REPLACEMENT, REDACTED_NAME)
    if cleaned != filename:
        try:
            check_relative_path(cleaned)
        except ValueError:
            cleaned = REDACTED_NAME
        folder, _, leaf = cleaned.rpartition("/")
        stem, dot, suffix = leaf.partition(".")
        number, candidate = 1, cleaned
        while candidate in taken:
            number += 1
            candidate = f"{folder}/" * bool(folder) + f"{stem}-{number}{dot}{suffix}"
        cleaned = candidate
    taken.add(cleaned)
    return cleaned


def content_type(filename: str) -> str:
    guessed, _ = mimetypes.guess_type(filename)
    return guessed or "application/octet-stream"


def new_file_id() -> str:
    return n.FILE_ID_PREFIX + secrets.token_urlsafe(18)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class ArtifactStore:
    """S3 side: the object at its key, then the tenant-scoped file_id pointer."""

    def __init__(self, s3: Any) -> None:
        self.s3 = s3

    def put(
        self,
        ctx: ArtifactContext,
        filename: str,
        data: bytes,
        *,
        redacted: bool,
        sha256: str | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> dict[str, Any]:
        """`sha256`: the bytes' digest when the caller has just verified it (saves a pass)."""
        file_id = new_file_id()
        sha = sha256 or hashlib.sha256(data).hexdigest()
        created_at = _iso(now())
        key = n.artifact_key(ctx.tenant_id, ctx.turn_id, ctx.invocation_id, filename)
        ctype = content_type(filename)
        # Object first, pointer second: a crash between them leaves an object no file_id names,
        # which the bucket's lifecycle expires; never a file_id that names nothing.
        self.s3.put_object(
            Bucket=ctx.bucket,
            Key=key,
            Body=data,
            ContentType=ctype,
            Metadata={
                n.META_FILE_ID: file_id,
                n.META_SHA256: sha,
                n.META_CREATED_AT: created_at,
                n.META_REDACTED: "true" if redacted else "false",
            },
        )
        entry = {
            "file_id": file_id,
            "filename": filename,
            "bytes": len(data),
            "content_type": ctype,
            "sha256": sha,
            "created_at": created_at,
        }
        pointer = {**entry, "key": key, "turn_id": ctx.turn_id, "invocation_id": ctx.invocation_id}
        self.s3.put_object(
            Bucket=ctx.bucket,
            Key=n.file_pointer_key(ctx.tenant_id, file_id),
            Body=json.dumps(pointer).encode(),
            ContentType="application/json",
        )
        return entry


@functools.cache
def s3_client() -> Any:
    """S3 for artifacts: SigV4 always (presigned GETs of SSE-KMS objects need it), endpoint from
    boto3's configuration like every other client (aws.client), created lazily once."""
    from botocore.config import Config

    return aws.new_client(
        "s3",
        config=Config(
            signature_version="s3v4", retries=dict(aws.RETRY_CONFIG), connect_timeout=3, read_timeout=60
        ),
    )
