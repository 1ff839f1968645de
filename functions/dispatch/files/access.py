"""`get_file`: a tenant's artifact by file_id -> metadata and a presigned GET.

The file_id resolves through its pointer object at naming.file_pointer_key(tenant, file_id),
i.e. only under the asking tenant's own prefix: another tenant's file_id and an unknown one
are the same missing object, so both get the same SandboxInvalidRequest (existence never leaks).
The URL is signed with dispatch's credentials, which may read only the artifacts bucket.
"""

from __future__ import annotations

from typing import Any

from sandbox_common import limits, messages
from sandbox_common.errors import SandboxError, SandboxInvalidRequest
from sandbox_common.files import GetFileRequest, read_pointer
from sandbox_common.outcome import internal_failure, public
from sandbox_runtime.artifacts import s3_client

from dispatch import parts

NOT_FOUND_MESSAGE = messages.FILE_NOT_FOUND
LOOKUP_FAILED_MESSAGE = "The file could not be looked up right now; please try again."


def get_file(
    request: GetFileRequest, *, s3: Any, bucket: str, expires_seconds: int = limits.PRESIGNED_URL_SECONDS
) -> dict[str, Any]:
    from botocore.exceptions import BotoCoreError, ClientError  # lazy: cold start, as runner/session.py

    if not 1 <= expires_seconds <= limits.PRESIGNED_URL_SECONDS:
        raise ValueError(f"presigned URLs live 1..{limits.PRESIGNED_URL_SECONDS} s")
    try:
        pointer = read_pointer(s3, bucket, request.tenant_id, request.file_id)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code")
        raise SandboxError(LOOKUP_FAILED_MESSAGE, failure_reason=f"get_file_failed:{code}") from None
    except (BotoCoreError, ValueError) as exc:
        raise SandboxError(
            LOOKUP_FAILED_MESSAGE, failure_reason=f"get_file_failed:{type(exc).__name__}"
        ) from None
    if pointer is None:
        raise SandboxInvalidRequest(NOT_FOUND_MESSAGE)
    url = s3.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": pointer["key"]}, ExpiresIn=expires_seconds
    )
    return {
        "ok": True,
        "file_id": request.file_id,
        "filename": pointer["filename"],
        "bytes": pointer["bytes"],
        "content_type": pointer["content_type"],
        "sha256": pointer["sha256"],
        "url": url,
    }


def answer(req: GetFileRequest, context: object) -> dict[str, Any]:
    """The get_file action: a lookup failure is answered (counted as an internal failure)."""
    try:
        return get_file(req, s3=s3_client(), bucket=parts.built().settings.artifacts_bucket)
    except SandboxError as failure:
        internal_failure(str(failure.fields.get("failure_reason")))
        return public(failure)
