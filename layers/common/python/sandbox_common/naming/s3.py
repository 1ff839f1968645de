"""S3: the artifacts bucket and its objects, what the session side of artifact collection names,
and the names an S3 client uses in a region."""

from __future__ import annotations

from .ids import PROJECT

OUTPUTS_DIR = "outputs"  # artifacts are collected from here, relative to the working directory
FIGURE_NAME = "figure-{n}.png"  # open matplotlib figures saved under this name
# Which version of each file under OUTPUTS_DIR the turn's calls have returned (path -> [size,
# mtime_ns]), kept in the session by the artifact collector and read by a job's supervisor (a job
# returns only what no call returned): relative to the working directory.
OUTPUTS_STATE_DIR = ".sandbox"
OUTPUTS_STATE_FILE = f"{OUTPUTS_STATE_DIR}/outputs-state.json"
# The in-session module in which each call's driver records when the call started (`started_ns`,
# the session's clock): files changed under OUTPUTS_DIR since then are the call's, not a job's.
CALL_START_MODULE = "_sbx_call"
SKIPPED_TOO_MANY = "too_many"
SKIPPED_TOO_LARGE = "too_large"
FILE_ID_PREFIX = "file-"
# Artifact objects live at {tenant}/{turn}/{invocation}/{filename}; the file_id → object pointer
# at {tenant}/_files/{file_id}.json ("_" cannot start a turn id: REQUEST_ID_RE), so a file_id
# resolves only under the tenant that asks: another tenant's id is simply absent.
FILE_POINTER_DIR = "_files"
# S3 user metadata of artifact objects (x-amz-meta-*): lower case, as S3 returns them.
META_FILE_ID = "file-id"
META_SHA256 = "sha256"
META_FILENAME = "filename"
META_CREATED_AT = "created-at"
META_REDACTED = "redacted"


def artifacts_bucket_name(stage: str, account: str) -> str:
    """Bucket names are global: the account keeps two accounts' stages apart."""
    return f"{PROJECT}-{stage}-artifacts-{account}"


def demo_data_bucket_name(stage: str) -> str:
    """The local stack's stand-in for a tenant's own data bucket (the demo reads a CSV from it)."""
    return f"{PROJECT}-{stage}-demo-tenant-data"


def artifact_key(tenant_id: str, turn_id: str, invocation_id: str, filename: str) -> str:
    return f"{tenant_id}/{turn_id}/{invocation_id}/{filename}"


def file_pointer_key(tenant_id: str, file_id: str) -> str:
    return f"{tenant_id}/{FILE_POINTER_DIR}/{file_id}.json"


def s3_endpoint_names(region: str) -> tuple[str, ...]:
    """The names an S3 client uses in a region (global and regional; a bucket's virtual host is a
    subdomain of either): what an allowlist session reaches directly, through the sessions VPC's
    S3 gateway endpoint (its DNS Firewall allows them and their subdomains, and the session's
    NO_PROXY names them) instead of through the egress proxy."""
    return ("s3.amazonaws.com", f"s3.{region}.amazonaws.com")
