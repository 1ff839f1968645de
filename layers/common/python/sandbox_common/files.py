"""Request models of files in and artifacts out: input files of `execute_code` and the `get_file` action.

Every rule that needs nothing but the request is checked here (so a bad entry is a
SandboxInvalidRequest before anything is counted); the one rule that needs the tenant's
configuration — an `s3_uri` must lie under one of the tenant's `data.read` prefixes — is
`check_s3_inputs`, which dispatch calls with the tenant's published prefixes, also before quota.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    model_validator,
)

from .errors import SandboxInvalidRequest
from .limits import MAX_INLINE_INPUT_BYTES, MAX_INPUT_FILES, MAX_INPUT_PATH_BYTES
from .naming import FILE_ID_PREFIX, FILE_POINTER_DIR, REQUEST_ID_RE, Action, file_pointer_key

S3_URI_RE = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(.+)$", re.DOTALL)
S3_PREFIX_RE = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(.*)$", re.DOTALL)
FILE_ID_RE = re.compile(rf"^{FILE_ID_PREFIX}[A-Za-z0-9_-]{{22,64}}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def check_relative_path(path: str) -> str:
    """A path relative to the session's working directory."""
    if not path:
        raise ValueError("path is empty")
    if "\x00" in path:
        raise ValueError("path contains a NUL character")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("path is not valid UTF-8 text") from None
    if size > MAX_INPUT_PATH_BYTES:
        raise ValueError(f"path is {size} bytes, over the {MAX_INPUT_PATH_BYTES}-byte limit")
    if path.startswith("/") or path.startswith("\\"):
        raise ValueError("path must be relative (no leading /)")
    segments = re.split(r"[/\\]", path)
    if ".." in segments:
        raise ValueError("path must not contain a '..' segment")
    if path.endswith("/") or "" in segments:
        raise ValueError("path must name a file (no empty segment, no trailing /)")
    return path


def check_s3_key(key: str) -> str:
    """A key that means what it reads, so a prefix test on it is a containment test.

    S3 keys are opaque strings, but a tool that copies or logs them may not treat them so: a
    `..` segment, a `%` escape (`%2e%2e`, `%2f`), a backslash, a control character, an empty
    segment or text that Unicode normalisation changes (a fullwidth dot U+FF0E is `.` under
    NFKC) could name another tenant's folder to something downstream. All are refused."""
    if unicodedata.normalize("NFKC", key) != key:
        raise ValueError("s3_uri key must be normalised text (NFKC)")
    if any(unicodedata.category(ch).startswith("C") for ch in key):
        raise ValueError("s3_uri key must not contain control or format characters")
    if "%" in key or "\\" in key:
        raise ValueError("s3_uri key must not contain % escapes or backslashes")
    segments = key.split("/")
    if any(segment in ("", ".", "..") for segment in segments):
        raise ValueError("s3_uri key must not contain empty, '.' or '..' segments")
    return key


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """(bucket, key) of `s3://bucket/key`; ValueError when it is not one or its key is not
    plain (check_s3_key)."""
    match = S3_URI_RE.match(uri)
    if not match or "\x00" in uri:
        raise ValueError("s3_uri must look like s3://bucket/key")
    return match.group(1), check_s3_key(match.group(2))


def normalize_prefix(prefix: str) -> str:
    """`s3://bucket/path` -> `s3://bucket/path/` (a prefix names a folder, never half a key)."""
    if not S3_PREFIX_RE.match(prefix) or "\x00" in prefix:
        raise ValueError(f"data prefix {prefix!r} must look like s3://bucket/ or s3://bucket/path/")
    return prefix if prefix.endswith("/") else prefix + "/"


def is_under(uri: str, prefixes: Iterable[str]) -> bool:
    """A containment test: False for a uri whose key is not plain (check_s3_key)."""
    try:
        parse_s3_uri(uri)
    except ValueError:
        return False
    return any(uri.startswith(normalize_prefix(p)) for p in prefixes)


class InputFile(_Strict):
    """One entry of `execute_code.files`: exactly one of content_base64 / s3_uri."""

    path: Annotated[str, AfterValidator(check_relative_path)]
    content_base64: str | None = None
    s3_uri: str | None = None
    _decoded: bytes | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _one_source(self) -> InputFile:
        if (self.content_base64 is None) == (self.s3_uri is None):
            raise ValueError("each file needs exactly one of content_base64 or s3_uri")
        if self.s3_uri is not None:
            parse_s3_uri(self.s3_uri)
        if self.content_base64 is not None:
            # A cheap upper bound first, so a huge string is refused without decoding it.
            if len(self.content_base64) // 4 * 3 > MAX_INLINE_INPUT_BYTES + 3:
                raise ValueError(f"inline content is over the {MAX_INLINE_INPUT_BYTES}-byte limit")
            try:  # decoded once, here: bad base64 is refused now, and the bytes are kept
                self._decoded = base64.b64decode(self.content_base64, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("content_base64 is not valid base64") from None
        return self

    @property
    def data(self) -> bytes:
        """The inline content's bytes, decoded once at validation (not on each of a call's five
        reads of a 3 MiB input)."""
        if self.content_base64 is None:
            raise ValueError("not an inline file")
        if self._decoded is None:  # a copy built without validation (model_construct)
            self._decoded = base64.b64decode(self.content_base64, validate=True)
        return self._decoded


def _inline_total(files: list[InputFile]) -> list[InputFile]:
    total = sum(len(f.data) for f in files if f.content_base64 is not None)
    if total > MAX_INLINE_INPUT_BYTES:
        raise ValueError(f"inline files total {total} bytes, over the {MAX_INLINE_INPUT_BYTES}-byte limit")
    paths = [f.path for f in files]
    if len(set(paths)) != len(paths):
        raise ValueError("two files have the same path")
    return files


InputFiles = Annotated[list[InputFile], Field(max_length=MAX_INPUT_FILES), AfterValidator(_inline_total)]


def check_s3_inputs(files: list[InputFile] | None, read_prefixes: Iterable[str]) -> None:
    """Every s3_uri under one of the tenant's `data.read` prefixes, else SandboxInvalidRequest.

    Called before quota: a refused input counts nothing and starts no session. The answer does
    not say which prefixes the tenant has, nor whether the object exists.
    """
    prefixes = tuple(read_prefixes)
    for index, item in enumerate(files or ()):
        if item.s3_uri is not None and not is_under(item.s3_uri, prefixes):
            raise SandboxInvalidRequest(
                f"Invalid request: files.{index}.s3_uri is not under a data location this workspace may read."
            )


def input_record(path: str, data: bytes) -> dict[str, Any]:
    """The audit row's `input_files` entry."""
    return {"path": path, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


class GetFileRequest(_Strict):
    action: Literal[Action.GET_FILE]
    tenant_id: Annotated[str, StringConstraints(pattern=REQUEST_ID_RE.pattern)]
    file_id: Annotated[str, StringConstraints(pattern=FILE_ID_RE.pattern)]


# --- artifact pointers: shared by dispatch's get_file and `sandboxctl files` ----------
_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound", "AccessDenied", "403"})


def read_pointer(s3: Any, bucket: str, tenant_id: str, file_id: str) -> dict[str, Any] | None:
    """The pointer of `file_id` under `tenant_id`, or None when there is none. Without
    s3:ListBucket S3 answers a missing key with 403 rather than 404: both mean "none". Any other
    failure propagates (botocore's ClientError / BotoCoreError)."""
    from botocore.exceptions import ClientError  # lazy: keeps this module importable without boto

    try:
        body = s3.get_object(Bucket=bucket, Key=file_pointer_key(tenant_id, file_id))["Body"].read()
    except ClientError as exc:
        if str(exc.response.get("Error", {}).get("Code")) in _MISSING_CODES:
            return None
        raise
    pointer = json.loads(body)
    # Defence in depth: a pointer names an object of its own tenant, or it is not one.
    if not isinstance(pointer, dict) or not str(pointer.get("key", "")).startswith(f"{tenant_id}/"):
        return None
    return pointer


def list_pointers(s3: Any, bucket: str, tenant_id: str, turn_id: str | None = None) -> list[dict[str, Any]]:
    """A tenant's artifacts (operator view), newest first; optionally one turn's."""
    found: list[dict[str, Any]] = []
    prefix = f"{tenant_id}/{FILE_POINTER_DIR}/"
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            file_id = obj["Key"][len(prefix) :].removesuffix(".json")
            pointer = read_pointer(s3, bucket, tenant_id, file_id)
            if pointer is not None and (turn_id is None or pointer.get("turn_id") == turn_id):
                found.append(pointer)
    return sorted(found, key=lambda p: str(p.get("created_at", "")), reverse=True)
