"""Artifacts out: after the user code ran (any outcome but timeout), collect new or
changed regular files under `outputs/` and the open matplotlib figures, redact text artifacts
host-side, store them in the stage's artifacts bucket, and describe them for the response
(`files`) and the audit row (`artifacts`).

One entry point: `Artifacts.collect(files, interpreter_id, session_id, ...)` (or
`collect_and_store`), used by dispatch after a call and (with `job_id`) by whoever observes a
background job's end — dispatch or the reaper, hence its place in the shared run time.

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

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sandbox_common import limits
from sandbox_common import naming as n
from sandbox_common.files import check_relative_path

from sandbox_runtime.artifacts.redact import Assembly
from sandbox_runtime.artifacts.store import ArtifactContext, ArtifactStore, CollectResult, safe_filename
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
        assembly = Assembly()
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


@dataclass(frozen=True)
class Artifacts:
    """A container's artifacts: its bucket and S3 store, collecting calls' and ended jobs' files."""

    bucket: str
    store: ArtifactStore

    def collect(
        self,
        files: SessionFiles,
        interpreter_id: str,
        session_id: str,
        *,
        tenant_id: str,
        turn_id: str,
        invocation_id: str,
        job_id: str | None = None,
    ) -> CollectResult:
        """`collect_and_store` under the call's (or the ended job's submit's) invocation id."""
        ctx = ArtifactContext(tenant_id, turn_id, invocation_id, self.bucket)
        return collect_and_store(files, interpreter_id, session_id, ctx, self.store, job_id=job_id)
