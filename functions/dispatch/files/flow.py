"""The container's artifacts: its bucket and the S3 store the collect stage (and get_file) use,
built on first use."""

from __future__ import annotations

from functools import cache

from sandbox_runtime.artifacts import Artifacts, ArtifactStore, s3_client


@cache
def artifacts(bucket: str) -> Artifacts:
    """The artifacts of a container whose settings name `bucket` (its S3 client: `s3_client`)."""
    return Artifacts(bucket, ArtifactStore(s3_client()))
