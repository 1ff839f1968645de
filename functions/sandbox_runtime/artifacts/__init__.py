"""Artifacts out: a call's (or an ended job's) new files collected from its session (`collect`),
redacted host-side (`redact`) and stored in the artifacts bucket (`store`)."""

from sandbox_runtime.artifacts.collect import (
    CHUNK_BYTES,
    READ_BATCH_BYTES,
    Artifacts,
    collect_and_store,
    collect_source,
)
from sandbox_runtime.artifacts.redact import PNG_SIGNATURE, redact_artifact
from sandbox_runtime.artifacts.store import (
    ArtifactContext,
    ArtifactStore,
    CollectResult,
    content_type,
    new_file_id,
    s3_client,
    safe_filename,
)

__all__ = [
    "CHUNK_BYTES",
    "PNG_SIGNATURE",
    "READ_BATCH_BYTES",
    "ArtifactContext",
    "ArtifactStore",
    "Artifacts",
    "CollectResult",
    "collect_and_store",
    "collect_source",
    "content_type",
    "new_file_id",
    "redact_artifact",
    "s3_client",
    "safe_filename",
]
