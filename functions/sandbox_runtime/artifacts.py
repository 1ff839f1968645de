"""Artifacts out (SPEC §14.2): after the user code ran (any outcome but timeout), collect new or
changed regular files under `outputs/` and the open matplotlib figures, redact text artifacts
host-side, store them in the stage's artifacts bucket, and describe them for the response
(`files`) and the audit row (`artifacts`).

One entry point: `collect_and_store(files, interpreter_id, session_id, ctx, store)`, used by
dispatch after a call and (with `job_id`) by whoever observes a background job's end — dispatch or
the reaper, hence its place in the shared run time.

How "new or changed" is known across calls: a helper snippet run in the session keeps a small
state file (`.sandbox/outputs-state.json`: path -> [size, mtime_ns]) next to the outputs. It
lists what differs from the last call, saves and closes open figures as `outputs/figure-N.png`,
and splits artifacts larger than one read chunk into part files, because one event-stream
message is limited in size. The answer is a JSON file read back with `readFiles`, never stdout
(the in-sandbox redactor rewrites stdout). The code in the session could tamper with that
state file: the worst it can do is hide or repeat its own artifacts, never reach another
tenant's (every byte is stored under the caller's tenant prefix by the host).

Background jobs share `outputs/` with the calls of their session, and each version of a file
comes back once: with the call during which it changed (from the call's start, which each call's
driver records in the session); with the job it belongs to, when it changed while a job ran and
not during a call — the job's supervisor lists those at the job's end (sandbox_session.jobs), and
the job's final answer returns them (`job_id`); a call never returns them, neither while the job
runs nor after. A file changed while two jobs ran comes back with the one that ends first.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import json
import mimetypes
import re
import secrets
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sandbox_common import aws, limits
from sandbox_common import naming as n
from sandbox_common.files import check_relative_path
from sandbox_common.redaction import catalogue

from sandbox_runtime.runner.job_snippets import JOB_ID_RE, JOBS_DIR_NAME
from sandbox_runtime.runner.tools import EXECUTE_CODE, SessionFiles, ToolFailed

STATE_DIR = n.OUTPUTS_STATE_DIR
ANSWER_PATH = f"{STATE_DIR}/collect.json"
# Raw bytes per part file, and per readFiles call. Parts are small because botocore's event-stream
# buffer copies the whole pending message on every 64 KiB it reads (cost ∝ message size²: an
# 8 MiB part cost ~0.15 s in copies alone); a call reads several parts so the number of round
# trips stays that of 8 MiB reads, and its answer stays far below one event-stream message
# (24 MiB) even if a service packs every block into one event.
CHUNK_BYTES = 1024 * 1024
READ_BATCH_BYTES = 8 * 1024 * 1024

_COLLECT_SOURCE = r"""
def __sandbox_collect(outputs, state_file, parts_dir, answer, max_bytes, chunk, figure_name, jobs_dir,
                      call_module, job_id):
    import hashlib, json, os, shutil, sys, tempfile
    final = ("completed", "failed", "timed_out", "cancelled")

    def load(path):
        try:
            with open(path) as fh:
                value = json.load(fh)
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def stat_of(full):
        st = os.lstat(full)
        return [st.st_size, st.st_mtime_ns] if os.path.isfile(full) and not os.path.islink(full) else None

    jobs_root = os.path.join(tempfile.gettempdir(), jobs_dir)
    now, changed = {}, []
    if job_id is None:  # a call's files: new or changed since the last call's collection
        os.makedirs(outputs, exist_ok=True)
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
        before = load(state_file) or {}
        # Background jobs of the session: the files an ended job returned are never a call's;
        # a file changed while a job ran, before this call started, waits for that job's end.
        claimed, running = {}, []
        if os.path.isdir(jobs_root):
            for name in os.listdir(jobs_root):
                job = os.path.join(jobs_root, name)
                if not os.path.isdir(job):
                    continue
                state = load(os.path.join(job, "state.json"))
                if state is not None and state.get("state") in final:
                    claimed.update(state.get("outputs") or {})
                    continue
                launched = (load(os.path.join(job, "launch.json")) or {}).get("launched_at")
                started = (state or {}).get("started_ns") or (launched and int(launched * 1e9))
                if started:
                    running.append(int(started))
        call_started = getattr(sys.modules.get(call_module), "started_ns", None)
        jobs_since = min(running) if running else None
        for root, dirs, files in os.walk(outputs, followlinks=False):
            dirs.sort()
            for name in sorted(files):
                full = os.path.join(root, name)
                st = stat_of(full)
                if st is None:
                    continue
                rel = os.path.relpath(full, outputs)
                during_call = call_started is not None and st[1] >= call_started
                if before.get(rel) == st:
                    now[rel] = st
                elif not during_call and claimed.get(rel) == st:
                    now[rel] = st  # a job's: it came back with the job
                elif not during_call and jobs_since is not None and st[1] >= jobs_since:
                    if rel in before:
                        now[rel] = before[rel]  # left for the job's end (not recorded as seen)
                else:
                    now[rel] = st
                    changed.append(rel)
    else:  # a job's files: those its supervisor recorded, still as the job left them
        state = load(os.path.join(jobs_root, job_id, "state.json")) or {}
        for rel, st in sorted((state.get("outputs") or {}).items()):
            full = os.path.normpath(os.path.join(outputs, rel))
            if not full.startswith(outputs + os.sep):
                continue
            try:
                if stat_of(full) == st:
                    now[rel] = st
                    changed.append(rel)
            except OSError:
                continue
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
    if job_id is None:
        tmp = state_file + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(now, fh)
        os.replace(tmp, state_file)  # whole: a job's supervisor reads it at the job's end
    with open(answer, "w") as fh:
        json.dump({"items": items}, fh)
    if not items:
        print(__NOTHING__)

__sandbox_collect(__ARGS__)
del __sandbox_collect
"""


# Printed by the helper when it found nothing, so the host skips reading the answer file (one
# readFiles less per call without artifacts: the critical path). Plain words no redaction
# pattern matches. Code in the session that forges or hides it can only hide or re-read its own
# artifacts; a missing marker (stdout redirected) just means the answer file is read as before.
NOTHING_MARKER = "sandbox-collect: nothing new"


def parts_dir(job_id: str | None = None) -> str:
    """Where the helper splits large artifacts: the calls' own, or one per job (a job's end may be
    collected while a call's parts wait to be read)."""
    return f"{STATE_DIR}/parts" if job_id is None else f"{STATE_DIR}/parts-{job_id}"


def answer_path(job_id: str | None = None) -> str:
    return ANSWER_PATH if job_id is None else f"{STATE_DIR}/collect-{job_id}.json"


def collect_source(
    max_bytes: int = limits.MAX_ARTIFACT_BYTES, chunk: int = CHUNK_BYTES, *, job_id: str | None = None
) -> str:
    """The helper for a call's artifacts, or (`job_id`) for the files an ended job left."""
    if job_id is not None and not JOB_ID_RE.match(job_id):
        raise ValueError("job ids are [A-Za-z0-9_-]{1,64}")
    args = ", ".join(
        "None" if v is None else json.dumps(v)
        for v in (
            n.OUTPUTS_DIR,
            n.OUTPUTS_STATE_FILE,
            parts_dir(job_id),
            answer_path(job_id),
            max_bytes,
            chunk,
            n.FIGURE_NAME,
            JOBS_DIR_NAME,
            n.CALL_START_MODULE,
            job_id,
        )
    )
    return _COLLECT_SOURCE.replace("__ARGS__", args).replace("__NOTHING__", json.dumps(NOTHING_MARKER))


def _collect_answer(files: SessionFiles, interpreter_id: str, session_id: str, job_id: str | None) -> Any:
    """The helper's answer: no items when it said so on stdout, else the answer file (readFiles)."""
    result = files.call(
        interpreter_id,
        session_id,
        EXECUTE_CODE,
        {"language": "python", "code": collect_source(job_id=job_id)},
    )
    exit_code = result.structured.get("exitCode")
    if exit_code not in (None, 0):
        raise ToolFailed(f"helper_failed:exit_code:{exit_code}")
    stdout = result.structured.get("stdout")
    if NOTHING_MARKER in (stdout if isinstance(stdout, str) else result.text()).splitlines():
        return {"items": []}
    path = answer_path(job_id)
    raw = files.read(interpreter_id, session_id, [path])[path]
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


# What a token shape in an artifact's name becomes: plain letters, because the name is also the
# S3 key's last part and the file name a download is saved under (no `<` `>` there).
REDACTED_NAME = "redacted"


def safe_filename(filename: str, taken: set[str]) -> str:
    """The name an artifact is listed, audited, logged and stored under: `filename` with every
    catalogue token shape replaced by REDACTED_NAME (SPEC §22). A replaced name that another
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
    """S3 side: the object at its §14.2 key, then the tenant-scoped file_id pointer."""

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


class _Assembly:
    """One artifact's bytes, taken part by part as they arrive (SPEC §14.2): their sha256, whether
    they are UTF-8 text, and the text's host-side redaction (§8 layer 2) of every complete line,
    so all of it runs while the next part is still on its way out of the session.

    The redaction equals `catalogue.redact` of the whole decoded text: no catalogue token
    contains a newline, so whole lines redact independently, and only the lines
    `catalogue.token_lines` names (those holding a token's anchor) are decoded and redacted.
    Anything that is not UTF-8 goes through `redact_other` once all of it is there."""

    def __init__(self) -> None:
        self.size = 0
        self._raw: list[bytes] = []
        self._sha = hashlib.sha256()
        self._decoder: Any = codecs.getincrementaldecoder("utf-8")("strict")
        self._text = True
        self._pending: list[bytes] = []  # the current line's bytes so far (no newline in them)
        self._clean: list[bytes | memoryview] = []
        self._changed = False

    def feed(self, block: bytes) -> None:
        self.size += len(block)
        self._raw.append(block)
        self._sha.update(block)
        if not self._text:
            return
        if not block.isascii() or self._pending_non_ascii():
            try:
                self._decoder.decode(block)
            except UnicodeDecodeError:
                self._text = False
                return
        newline = block.rfind(b"\n")
        if newline < 0:
            self._pending.append(block)
            return
        head = block if newline == len(block) - 1 else block[: newline + 1]
        lines = b"".join([*self._pending, head]) if self._pending else head
        self._pending = [block[newline + 1 :]] if newline < len(block) - 1 else []
        self._redact_lines(lines)

    def _pending_non_ascii(self) -> bool:
        # the decoder holds the start of a multi-byte character cut at the previous block's end
        return bool(self._decoder.getstate()[0])

    def _redact_lines(self, data: bytes) -> None:
        done, view = 0, memoryview(data)  # views: the pieces are copied once, by the final join
        for start, end in catalogue.token_lines(data):
            text = data[start:end].decode("utf-8")
            cleaned = catalogue.redact(text)
            if cleaned != text:
                self._clean.extend((view[done:start], cleaned.encode("utf-8")))
                self._changed, done = True, end
        self._clean.append(view[done:] if done else data)

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()

    def finish(self) -> tuple[bytes, bool]:
        """(bytes to store, whether redaction changed anything)."""
        raw = self._raw[0] if len(self._raw) == 1 else b"".join(self._raw)
        if self._text:
            try:
                self._decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                self._text = False
        if self._text and self._pending:  # the last line, without a newline
            self._redact_lines(b"".join(self._pending))
            self._pending = []
        if not self._text:
            return redact_other(raw)
        stored, changed = (b"".join(self._clean), True) if self._changed else (raw, False)
        if b"\x00" in stored:  # NUL is UTF-8 too: ASCII text in UTF-16 without a byte-order mark
            runs_redacted = redact_utf16_runs(stored)
            return runs_redacted, changed or runs_redacted != stored
        return stored, changed


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The PNG chunks an image needs (its header, palette, data and end, transparency and colour),
# kept; every other chunk — text (`savefig(metadata=...)` writes tEXt), eXIf, time, private and
# unknown ones — may carry anything and is dropped.
PNG_IMAGE_CHUNKS = frozenset(
    {b"IHDR", b"PLTE", b"IDAT", b"IEND", b"tRNS", b"gAMA", b"cHRM", b"sRGB", b"iCCP", b"pHYs"}
)
# What a token-shaped iCCP profile name becomes (its profile, compressed colour data, is kept).
ICC_PROFILE_NAME = b"ICC profile"
# UTF-16 text without a byte-order mark, as it sits in a file: runs of at least this many code
# units of printable Latin-1 (ASCII text with every other byte NUL), in either byte order and at
# either byte offset. A token is longer than this, and whatever prefix its class needs
# (`Authorization: Bearer `) is in its run.
_UTF16_MIN_RUN = 16
_UTF16_TEXT_BYTE = bytes(int(b in (9, 10, 13) or 0x20 <= b <= 0x7E or b >= 0xA0) for b in range(256))
_UTF16_NUL_BYTE = bytes(int(b == 0) for b in range(256))
_UTF16_BYTE_CLASS = bytes(
    ord("Z") if b == 0 else ord("T") if _UTF16_TEXT_BYTE[b] else ord("O") for b in range(256)
)
_UTF16_RUN_CLASSES = b"TZ" * (_UTF16_MIN_RUN - 1) + b"T"
# Byte-order marks, longest first (UTF-32-LE's starts with UTF-16-LE's).
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def redact_utf16_runs(data: bytes) -> bytes:
    """`data` with every UTF-16 run (no byte-order mark needed: either byte order, at any offset)
    decoded, redacted and encoded back in place; the bytes around the runs are kept as they are.
    The runs are found at C speed (each half of the code units mapped to 0/1 and the two masks
    ANDed as integers), so a large binary file costs a few passes over its bytes."""
    if not _has_utf16_run(data):  # the common case (binary): one look, nothing decoded
        return data
    for offset in (0, 1):
        for codec in ("utf-16-le", "utf-16-be"):
            data = _redact_runs(data, offset, codec)
    return data


def _has_utf16_run(data: bytes) -> bool:
    """Whether a UTF-16 run of _UTF16_MIN_RUN units is in `data`, either order, either offset:
    with every byte mapped to its class (T text, Z NUL, O other), such a run reads TZTZ… (little
    endian) or ZTZT… (big endian), and both hold TZ…T; one translate and one find."""
    return _UTF16_RUN_CLASSES in data.translate(_UTF16_BYTE_CLASS)


def _redact_runs(data: bytes, offset: int, codec: str) -> bytes:
    first, second = data[offset::2], data[offset + 1 :: 2]
    units = min(len(first), len(second))
    text_half, nul_half = (first, second) if codec == "utf-16-le" else (second, first)
    mask = (
        int.from_bytes(text_half[:units].translate(_UTF16_TEXT_BYTE), "big")
        & int.from_bytes(nul_half[:units].translate(_UTF16_NUL_BYTE), "big")
    ).to_bytes(units, "big")
    needle = b"\x01" * _UTF16_MIN_RUN
    pieces: list[bytes] = []
    done = at = 0
    while (start := mask.find(needle, at)) >= 0:
        end = mask.find(b"\x00", start)
        end = units if end < 0 else end
        at = end
        lo, hi = offset + 2 * start, offset + 2 * end
        text = data[lo:hi].decode(codec)
        cleaned = catalogue.redact(text)
        if cleaned != text:
            pieces += (data[done:lo], cleaned.encode(codec))
            done = hi
    return b"".join([*pieces, data[done:]]) if pieces else data


def redact_other(data: bytes) -> tuple[bytes, bool]:
    """An artifact that is not UTF-8: a PNG keeps only the chunks an image needs (a PNG whose
    chunks do not parse is redacted on its bytes); text behind a UTF-16/UTF-32 byte-order mark
    is decoded, redacted and encoded back; anything else without a NUL byte is ASCII-compatible
    text (latin-1, cp1252, UTF-8 with invalid bytes) and is redacted on its bytes, every byte
    that is not part of a token kept as it is. What is left (NUL bytes, no byte-order mark) is
    binary: its UTF-16 runs (text without a byte-order mark) are redacted, every other byte is
    stored as it is."""
    if data.startswith(PNG_SIGNATURE):
        stripped = strip_png_text(data)
        if stripped is None:  # not an image any decoder reads whole: no chunk of it is trusted
            on_bytes = redact_utf16_runs(catalogue.redact_bytes(data))
            return on_bytes, on_bytes != data
        return stripped, stripped != data
    for bom, codec in _BOMS:
        if data.startswith(bom):
            width = 4 if "32" in codec else 2
            body = data[len(bom) :]
            whole = len(body) - len(body) % width
            try:
                text = body[:whole].decode(codec, "surrogatepass")
            except UnicodeDecodeError:
                continue  # not UTF-32 after all (a UTF-16-LE text starting with U+0000)
            cleaned = catalogue.redact(text)
            if cleaned == text:
                return data, False
            return bom + cleaned.encode(codec, "surrogatepass") + body[whole:], True
    if b"\x00" in data:
        cleaned_runs = redact_utf16_runs(data)
        return cleaned_runs, cleaned_runs != data
    cleaned_bytes = catalogue.redact_bytes(data)
    return cleaned_bytes, cleaned_bytes != data


def strip_png_text(data: bytes) -> bytes | None:
    """`data` (a PNG) with only the chunks an image needs (PNG_IMAGE_CHUNKS; an iCCP profile
    whose name holds a token shape is renamed) and nothing after IEND; None when the chunk
    structure does not parse."""
    kept, at, size = [data[:8]], 8, len(data)
    while at + 12 <= size:
        length = int.from_bytes(data[at : at + 4], "big")
        kind = data[at + 4 : at + 8]
        end = at + 12 + length
        if end > size:
            return None
        if kind == b"iCCP":
            kept.append(_clean_iccp(data[at:end]))
        elif kind in PNG_IMAGE_CHUNKS:
            kept.append(data[at:end])
        at = end
        if kind == b"IEND":
            return b"".join(kept)
    return None


def _clean_iccp(chunk: bytes) -> bytes:
    """An iCCP chunk (length, type, body, CRC) whose profile name — a Latin-1 keyword before the
    body's first NUL — is ICC_PROFILE_NAME instead when it holds a token shape."""
    body = chunk[8:-4]
    name, nul, rest = body.partition(b"\x00")
    if not nul or catalogue.redact(name.decode("latin-1")) == name.decode("latin-1"):
        return chunk
    body = ICC_PROFILE_NAME + b"\x00" + rest
    return len(body).to_bytes(4, "big") + b"iCCP" + body + zlib.crc32(b"iCCP" + body).to_bytes(4, "big")


def redact_artifact(data: bytes) -> tuple[bytes, bool]:
    """Text (UTF-8 decodable) through the host-side catalogue redactor (§8 layer 2), anything
    else through `redact_other`. Returns (bytes to store, whether redaction changed anything); equal to
    `catalogue.redact(data.decode())` for text, computed chunk by chunk on the bytes."""
    assembly = _Assembly()
    assembly.feed(data)
    return assembly.finish()


def collect_and_store(
    files: SessionFiles,
    interpreter_id: str,
    session_id: str,
    ctx: ArtifactContext,
    store: ArtifactStore,
    *,
    job_id: str | None = None,
) -> CollectResult:
    """Collect this call's artifacts (or, with `job_id`, the files that ended job left) from the
    session and store them. Never raises for a collection problem: the call's own result stands
    and `failure_reason` says what failed."""
    try:
        answer = _collect_answer(files, interpreter_id, session_id, job_id)
        items = answer["items"]
    except ToolFailed as exc:
        return CollectResult([], [], f"artifacts:{exc.reason}")
    except (KeyError, TypeError):
        return CollectResult([], [], "artifacts:helper_failed:malformed_answer")
    listed: list[dict[str, Any]] = []
    artifacts: list[dict[str, Any]] = []
    stored = 0
    failure: str | None = None
    # Every name the session reported is taken first: a redacted name never lands on another's.
    taken = {str(item["filename"]) for item in items if _well_formed(item, parts_dir(job_id))}
    for item in items:
        if not _well_formed(item, parts_dir(job_id)):  # the answer lives in the session: code may forge it
            failure = failure or "artifacts:forged_entry"
            continue
        raw_name, size = str(item["filename"]), int(item["bytes"])
        taken.discard(raw_name)
        filename = safe_filename(raw_name, taken)
        if size > limits.MAX_ARTIFACT_BYTES or "sha256" not in item:
            listed.append({"filename": filename, "bytes": size, "skipped": n.SKIPPED_TOO_LARGE})
            continue
        if stored >= limits.MAX_ARTIFACTS:
            listed.append({"filename": filename, "bytes": size, "skipped": n.SKIPPED_TOO_MANY})
            continue
        assembly = _Assembly()
        try:
            for block in _read_artifact(files, interpreter_id, session_id, item):
                assembly.feed(block)
        except ToolFailed as exc:
            failure = failure or f"artifacts:{exc.reason}"
            continue
        if assembly.size > limits.MAX_ARTIFACT_BYTES:
            listed.append({"filename": filename, "bytes": assembly.size, "skipped": n.SKIPPED_TOO_LARGE})
            continue
        if assembly.size != size or assembly.sha256 != item["sha256"]:
            failure = failure or "artifacts:sha256_mismatch"
            continue
        clean, redacted = assembly.finish()
        entry = store.put(
            ctx, filename, clean, redacted=redacted, sha256=None if redacted else item["sha256"]
        )
        stored += 1
        listed.append(entry)
        artifacts.append({k: entry[k] for k in ("file_id", "filename", "bytes", "sha256")})
    return CollectResult(listed, artifacts, failure)


_MAX_PARTS = -(-limits.MAX_ARTIFACT_BYTES // CHUNK_BYTES)


def _well_formed(item: Any, parts_root: str) -> bool:
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
    listed = item.get("parts", [])
    if not isinstance(listed, list) or len(listed) > _MAX_PARTS:
        return False
    return all(isinstance(p, str) and re.fullmatch(rf"{re.escape(parts_root)}/\d+\.\d+", p) for p in listed)


def _read_artifact(
    files: SessionFiles, interpreter_id: str, session_id: str, item: dict[str, Any]
) -> Iterator[bytes]:
    """The artifact's bytes in order, part by part. Parts are read in batches, each batch asked
    for while the caller still works on the one before (one reader thread, one batch ahead):
    the session encodes and sends while the host checks and redacts. A failed read raises
    ToolFailed where its batch is due."""
    parts = [str(p) for p in item.get("parts") or []]
    if not parts:
        path = str(item["path"])
        yield files.read(interpreter_id, session_id, [path])[path]
        return
    per_call = max(1, READ_BATCH_BYTES // CHUNK_BYTES)
    batches = [parts[first : first + per_call] for first in range(0, len(parts), per_call)]
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="artifact-read") as reader:
        ahead = reader.submit(files.read, interpreter_id, session_id, batches[0])
        for index, batch in enumerate(batches):
            found = ahead.result()
            if index + 1 < len(batches):
                ahead = reader.submit(files.read, interpreter_id, session_id, batches[index + 1])
            for path in batch:
                yield found[path]


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
