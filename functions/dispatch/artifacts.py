"""Artifacts out (SPEC §14.2): after the user code ran (any outcome but timeout), collect new or
changed regular files under `outputs/` and the open matplotlib figures, redact text artifacts
host-side, store them in the stage's artifacts bucket, and describe them for the response
(`files`) and the audit row (`artifacts`).

One entry point: `collect_and_store(files, interpreter_id, session_id, ctx, store)`.

How "new or changed" is known across calls: a helper snippet run in the session keeps a small
state file (`.sandbox/outputs-state.json`: path -> [size, mtime_ns]) next to the outputs. It
lists what differs from the last call, saves and closes open figures as `outputs/figure-N.png`,
and splits artifacts larger than one read chunk into part files, because one event-stream
message is limited in size. The answer is a JSON file read back with `readFiles`, never stdout
(the in-sandbox redactor rewrites stdout). The code in the session could tamper with that
state file: the worst it can do is hide or repeat its own artifacts, never reach another
tenant's (every byte is stored under the caller's tenant prefix by the host).
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sandbox_common import naming as n
from sandbox_common.files import check_relative_path
from sandbox_common.redaction import catalogue

from .runner.tools import EXECUTE_CODE, SessionFiles, ToolFailed

STATE_DIR = ".sandbox"
ANSWER_PATH = f"{STATE_DIR}/collect.json"
# Raw bytes per part file, and per readFiles call. Parts are small because botocore's event-stream
# buffer copies the whole pending message on every 64 KiB it reads (cost ∝ message size²: an
# 8 MiB part cost ~0.15 s in copies alone); a call reads several parts so the number of round
# trips stays that of 8 MiB reads, and its answer stays far below one event-stream message
# (24 MiB) even if a service packs every block into one event.
CHUNK_BYTES = 1024 * 1024
READ_BATCH_BYTES = 8 * 1024 * 1024
# Text artifacts are redacted in line-aligned chunks of about this size: no catalogue token
# contains a newline, and the catalogue's byte prefilter passes a chunk without any token
# shape through untouched, never decoded.
REDACT_CHUNK_BYTES = 64 * 1024

_COLLECT_SOURCE = r'''
def __sandbox_collect(outputs, state_dir, answer, max_bytes, chunk, figure_name):
    import hashlib, json, os, shutil, sys
    os.makedirs(outputs, exist_ok=True)
    os.makedirs(state_dir, exist_ok=True)
    figures = []
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        for num in plt.get_fignums():
            k = num
            while os.path.exists(os.path.join(outputs, figure_name.format(n=k))):
                k += 1
            name = figure_name.format(n=k)
            plt.figure(num).savefig(os.path.join(outputs, name), format="png")
            figures.append(name)
        plt.close("all")
    state_file = os.path.join(state_dir, "outputs-state.json")
    try:
        with open(state_file) as fh:
            before = json.load(fh)
    except (OSError, ValueError):
        before = {}
    now, changed = {}, []
    for root, dirs, files in os.walk(outputs, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            st = os.stat(full)
            rel = os.path.relpath(full, outputs)
            now[rel] = [st.st_size, st.st_mtime_ns]
            if before.get(rel) != now[rel]:
                changed.append(rel)
    parts_dir = os.path.join(state_dir, "parts")
    shutil.rmtree(parts_dir, ignore_errors=True)
    os.makedirs(parts_dir)
    items = []
    for index, rel in enumerate(changed):
        full = os.path.join(outputs, rel)
        size = now[rel][0]
        item = {"filename": rel, "path": full, "bytes": size, "parts": []}
        if size <= max_bytes:
            digest = hashlib.sha256()
            with open(full, "rb") as fh:
                if size > chunk:
                    part = 0
                    while True:
                        block = fh.read(chunk)
                        if not block:
                            break
                        name = os.path.join(parts_dir, "%d.%d" % (index, part))
                        with open(name, "wb") as out:
                            out.write(block)
                        item["parts"].append(name)
                        digest.update(block)
                        part += 1
                else:
                    digest.update(fh.read())
            item["sha256"] = digest.hexdigest()
        items.append(item)
    with open(state_file, "w") as fh:
        json.dump(now, fh)
    with open(answer, "w") as fh:
        json.dump({"items": items, "figures": figures}, fh)
    if not items:
        print(__NOTHING__)

__sandbox_collect(__ARGS__)
del __sandbox_collect
'''


# Printed by the helper when it found nothing, so the host skips reading the answer file (one
# readFiles less per call without artifacts: issue 9's critical path). Plain words no redaction
# pattern matches. Code in the session that forges or hides it can only hide or re-read its own
# artifacts; a missing marker (stdout redirected) just means the answer file is read as before.
NOTHING_MARKER = "sandbox-collect: nothing new"


def collect_source(max_bytes: int = n.MAX_ARTIFACT_BYTES, chunk: int = CHUNK_BYTES) -> str:
    args = ", ".join(json.dumps(v) for v in (n.OUTPUTS_DIR, STATE_DIR, ANSWER_PATH, max_bytes, chunk, n.FIGURE_NAME))
    return _COLLECT_SOURCE.replace("__ARGS__", args).replace("__NOTHING__", json.dumps(NOTHING_MARKER))


def _collect_answer(files: SessionFiles, interpreter_id: str, session_id: str) -> Any:
    """The helper's answer: no items when it said so on stdout, else the answer file (readFiles)."""
    result = files.call(interpreter_id, session_id, EXECUTE_CODE, {"language": "python", "code": collect_source()})
    exit_code = result.structured.get("exitCode")
    if exit_code not in (None, 0):
        raise ToolFailed(f"helper_failed:exit_code:{exit_code}")
    stdout = result.structured.get("stdout")
    if NOTHING_MARKER in (stdout if isinstance(stdout, str) else result.text()).splitlines():
        return {"items": []}
    raw = files.read(interpreter_id, session_id, [ANSWER_PATH])[ANSWER_PATH]
    try:
        return json.loads(raw)
    except ValueError:
        raise ToolFailed("helper_failed:unreadable_answer") from None


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


def content_type(filename: str) -> str:
    guessed, _ = mimetypes.guess_type(filename)
    return guessed or "application/octet-stream"


def new_file_id() -> str:
    return n.FILE_ID_PREFIX + secrets.token_urlsafe(18)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class ArtifactStore:
    """S3 side: the object at its §14.2 key, then the tenant-scoped file_id pointer."""

    def __init__(self, s3: Any) -> None:
        self.s3 = s3

    def put(self, ctx: ArtifactContext, filename: str, data: bytes, *, redacted: bool, sha256: str | None = None,
            now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> dict[str, Any]:  # fmt: skip
        """`sha256`: the bytes' digest when the caller has just verified it (saves a pass)."""
        file_id = new_file_id()
        sha = sha256 or hashlib.sha256(data).hexdigest()
        created_at = _iso(now())
        key = n.artifact_key(ctx.tenant_id, ctx.turn_id, ctx.invocation_id, filename)
        ctype = content_type(filename)
        # Object first, pointer second: a crash between them leaves an object no file_id names,
        # which the bucket's lifecycle expires; never a file_id that names nothing.
        self.s3.put_object(
            Bucket=ctx.bucket, Key=key, Body=data, ContentType=ctype,
            Metadata={n.META_FILE_ID: file_id, n.META_SHA256: sha, n.META_CREATED_AT: created_at,
                      n.META_REDACTED: "true" if redacted else "false"},
        )  # fmt: skip
        entry = {"file_id": file_id, "filename": filename, "bytes": len(data), "content_type": ctype,
                 "sha256": sha, "created_at": created_at}  # fmt: skip
        pointer = {**entry, "key": key, "turn_id": ctx.turn_id, "invocation_id": ctx.invocation_id}
        self.s3.put_object(
            Bucket=ctx.bucket, Key=n.file_pointer_key(ctx.tenant_id, file_id),
            Body=json.dumps(pointer).encode(), ContentType="application/json",
        )  # fmt: skip
        return entry


def redact_artifact(data: bytes) -> tuple[bytes, bool]:
    """Text (UTF-8 decodable) through the host-side catalogue redactor (§8 layer 2), anything
    else byte-exact. Returns (bytes to store, whether redaction changed anything); equal to
    `catalogue.redact(data.decode())` for text, computed chunk by chunk on the bytes."""
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return data, False
    pieces: list[bytes] = []
    changed = False
    start, size = 0, len(data)
    while start < size:
        newline = data.find(b"\n", start + REDACT_CHUNK_BYTES)
        end = size if newline < 0 else newline + 1
        chunk = data[start:end] if start or end < size else data
        if catalogue.candidate_classes_utf8(chunk):
            text = chunk.decode("utf-8")
            cleaned = catalogue.redact(text)
            if cleaned != text:
                chunk, changed = cleaned.encode("utf-8"), True
        pieces.append(chunk)
        start = end
    return (b"".join(pieces), True) if changed else (data, False)


def collect_and_store(
    files: SessionFiles,
    interpreter_id: str,
    session_id: str,
    ctx: ArtifactContext,
    store: ArtifactStore,
) -> CollectResult:
    """Collect this call's artifacts from the session and store them. Never raises for a
    collection problem: the call's own result stands and `failure_reason` says what failed."""
    try:
        answer = _collect_answer(files, interpreter_id, session_id)
        items = answer["items"]
    except ToolFailed as exc:
        return CollectResult([], [], f"artifacts:{exc.reason}")
    except (KeyError, TypeError):
        return CollectResult([], [], "artifacts:helper_failed:malformed_answer")
    listed: list[dict[str, Any]] = []
    artifacts: list[dict[str, Any]] = []
    stored = 0
    failure: str | None = None
    for item in items:
        if not _well_formed(item):  # the answer file lives in the session: code there may forge it
            failure = failure or "artifacts:forged_entry"
            continue
        filename, size = str(item["filename"]), int(item["bytes"])
        if size > n.MAX_ARTIFACT_BYTES or "sha256" not in item:
            listed.append({"filename": filename, "bytes": size, "skipped": n.SKIPPED_TOO_LARGE})
            continue
        if stored >= n.MAX_ARTIFACTS:
            listed.append({"filename": filename, "bytes": size, "skipped": n.SKIPPED_TOO_MANY})
            continue
        try:
            data = _read_artifact(files, interpreter_id, session_id, item)
        except ToolFailed as exc:
            failure = failure or f"artifacts:{exc.reason}"
            continue
        if len(data) > n.MAX_ARTIFACT_BYTES:
            listed.append({"filename": filename, "bytes": len(data), "skipped": n.SKIPPED_TOO_LARGE})
            continue
        if len(data) != size or hashlib.sha256(data).hexdigest() != item["sha256"]:
            failure = failure or "artifacts:sha256_mismatch"
            continue
        clean, redacted = redact_artifact(data)
        entry = store.put(ctx, filename, clean, redacted=redacted, sha256=None if redacted else item["sha256"])
        stored += 1
        listed.append(entry)
        artifacts.append({k: entry[k] for k in ("file_id", "filename", "bytes", "sha256")})
    return CollectResult(listed, artifacts, failure)


_MAX_PARTS = -(-n.MAX_ARTIFACT_BYTES // CHUNK_BYTES)


def _well_formed(item: Any) -> bool:
    """An entry the host may act on: a safe relative filename (the S3 key's last part), read
    only from `outputs/<filename>` or our own part files, a sane size and part count."""
    if not isinstance(item, dict) or not isinstance(item.get("filename"), str):
        return False
    filename = item["filename"]
    try:
        check_relative_path(filename)
    except ValueError:
        return False
    if filename.startswith(f"{n.FILE_POINTER_DIR}/") or item.get("path") != f"{n.OUTPUTS_DIR}/{filename}":
        return False
    if not isinstance(item.get("bytes"), int) or isinstance(item["bytes"], bool) or item["bytes"] < 0:
        return False
    parts = item.get("parts", [])
    if not isinstance(parts, list) or len(parts) > _MAX_PARTS:
        return False
    return all(isinstance(p, str) and re.fullmatch(rf"{re.escape(STATE_DIR)}/parts/\d+\.\d+", p) for p in parts)


def _read_artifact(files: SessionFiles, interpreter_id: str, session_id: str, item: dict[str, Any]) -> bytes:
    parts = [str(p) for p in item.get("parts") or []]
    if not parts:
        path = str(item["path"])
        return files.read(interpreter_id, session_id, [path])[path]
    per_call = max(1, READ_BATCH_BYTES // CHUNK_BYTES)
    found: dict[str, bytes] = {}
    for first in range(0, len(parts), per_call):
        found.update(files.read(interpreter_id, session_id, parts[first:first + per_call]))
    return b"".join(found[p] for p in parts)
