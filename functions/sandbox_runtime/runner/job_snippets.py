"""The executeCode snippets that drive background jobs inside a session (docs/jobs.md).

Each is one self-contained `executeCode` call (the same tool every call already uses, so jobs
work identically on AgentCore and on the local interpreter) that prints exactly one line:
JOB_MARKER + JSON. User code is never concatenated with anything: it travels as base64 data and
is written byte-exact to the job's `code.py`, which the in-sandbox supervisor
(`sandbox_session.jobs`) runs in a new process under the stdio redactor.

- submit: installs the runtime files (supervisor, redaction catalogue, stdio redactor, shell
  runtime and Node.js runner — the very modules the host uses) under `<tmp>/sbx-jobs/`, writes the
  job's code and spec, starts the supervisor in its own session and returns at once.
- status: the job's state; while it runs, the last JOB_PROGRESS_TAIL_BYTES of each output file and
  their sizes so far; for a final state also the head of stdout/stderr (base64, so the JSON
  survives the kernel's own redactor intact), their exact byte sizes and the stderr tail.
- cancel: SIGTERM to the supervisor (which kills the job's process tree and records
  `cancelled`), waiting up to CANCEL_WAIT_SECONDS; if the supervisor does not answer, the snippet
  kills the job's process group itself and records `cancelled`.

A supervisor that vanished without a final state (killed by the job's own code) makes the job
`failed` with `supervisor_lost`; a job still running past its deadline + grace is killed and
recorded `timed_out` by the status snippet itself.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from sandbox_common import limits
from sandbox_common import naming as n
from sandbox_common.redaction import catalogue
from sandbox_common.tool_spec import CODE_LANGUAGE, LANGUAGES
from sandbox_session import jobs as jobs_runtime
from sandbox_session import node as node_runtime
from sandbox_session import redactor as stdio_runtime
from sandbox_session import shell as shell_runtime

JOB_MARKER = "__SANDBOX_JOB__ "
JOBS_DIR_NAME = "sbx-jobs"
CANCEL_WAIT_SECONDS = 5.0
# The supervisor enforces timeout_s; the status snippet steps in only if it is gone or stuck.
DEADLINE_GRACE_SECONDS = 10.0
TAIL_BYTES = 8192
# Where the job's supervisor finds the outputs/ directory, the turn's calls' record of what they
# returned, and the name of a figure the job leaves open (sandbox_session.jobs.job_outputs).
JOB_FILES = {
    "outputs_dir": n.OUTPUTS_DIR,
    "calls_state": n.OUTPUTS_STATE_FILE,
    "figure_name": n.FIGURE_NAME,
}
# Job ids become directory names in the session: only ids dispatch generates are accepted.
JOB_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

_SUBMIT = """\
def _sbx_job_submit(job_id, code_b64, language, timeout_s, sources, version, values, marker, files):
    import base64, json, os, subprocess, sys, tempfile, time
    root = os.path.join(tempfile.gettempdir(), {dir_name!r})
    os.makedirs(root, mode=0o700, exist_ok=True)
    version_file = os.path.join(root, "VERSION")
    if sources is None:  # the runtime travels once per session: is this version installed?
        try:
            with open(version_file, encoding="utf-8") as fh:
                installed = fh.read()
        except OSError:
            installed = None
        if installed != version:
            print(marker + json.dumps({{"job_id": job_id, "state": "runtime_missing"}}))
            return
    else:
        for name, text in list(sources.items()) + [("VERSION", version)]:
            path = os.path.join(root, name)
            tmp = "%s.%d.tmp" % (path, os.getpid())
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
    job_dir = os.path.join(root, job_id)
    try:
        os.mkdir(job_dir, 0o700)
    except FileExistsError:  # a retried submit: the job already exists, never start it twice
        print(marker + json.dumps({{"job_id": job_id, "state": "exists"}}))
        return
    with open(os.path.join(job_dir, {code_file!r}), "wb") as fh:
        fh.write(base64.b64decode(code_b64))
    spec = {{"job_id": job_id, "timeout_s": timeout_s, "cwd": os.getcwd(), "values": list(values),
             "language": language, "submitted_at": time.time(), **files}}
    with open(os.path.join(job_dir, {spec_file!r}), "w", encoding="utf-8") as fh:
        json.dump(spec, fh)
    proc = subprocess.Popen(
        [sys.executable, "-S", os.path.join(root, {runtime_file!r}), "supervise", job_dir],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        close_fds=True, start_new_session=True,
    )
    with open(os.path.join(job_dir, "launch.json"), "w", encoding="utf-8") as fh:
        json.dump({{"supervisor_pid": proc.pid, "launched_at": time.time()}}, fh)
    print(marker + json.dumps({{"job_id": job_id, "state": "running", "supervisor_pid": proc.pid}}))


_sbx_job_submit({job_id!r}, {code_b64!r}, {language!r}, {timeout_s!r}, {sources!r}, {version!r}, {values!r},
                {marker!r}, {files!r})
del _sbx_job_submit
"""

_STATUS = """\
def _sbx_job_status(job_id, cancel, out_limit, err_limit, tail_bytes, progress_bytes, cancel_wait, grace,
                    marker):
    import base64, json, os, signal, tempfile, time
    job_dir = os.path.join(tempfile.gettempdir(), {dir_name!r}, job_id)

    def load(name):
        try:
            with open(os.path.join(job_dir, name), encoding="utf-8") as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return None

    def alive(pid):
        if not pid:
            return False
        try:
            os.waitpid(pid, os.WNOHANG)  # reap it if it is our child and has ended
        except ChildProcessError:
            pass
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:
            with open("/proc/%d/stat" % pid, "rb") as fh:
                return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
        except (OSError, IndexError):
            return True

    def job_groups():
        # Process groups of processes started for this job dir (its argv names it): the job
        # even when the supervisor died before recording the job's pid.
        groups = set()
        needle = job_dir.encode()
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open("/proc/%s/cmdline" % name, "rb") as fh:
                        if needle in fh.read().split(b"\\0"):
                            groups.add(os.getpgid(int(name)))
                except (OSError, ProcessLookupError):
                    pass
        return groups

    def finish(state, reason):
        state = dict(state or {{}})
        for group in {{state.get("pid"), supervisor, *job_groups()}}:  # job, supervisor, strays
            if group and group != os.getpgrp():
                try:
                    os.killpg(group, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        now = time.time()
        started = state.get("started_at") or launch.get("launched_at") or now
        state.update(job_id=job_id, state=reason[0], exit_code=state.get("exit_code"), ended_at=now,
                     duration_ms=int(round((now - started) * 1000)), started_at=started, reason=reason[1])
        tmp = os.path.join(job_dir, "state.json.%d.tmp" % os.getpid())
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(state, fh)
        os.replace(tmp, os.path.join(job_dir, "state.json"))
        return state

    def head(name, limit, last_bytes=tail_bytes):
        path = os.path.join(job_dir, name)
        try:
            size = os.path.getsize(path)
            with open(path, "rb") as fh:
                first = fh.read(limit)
                fh.seek(max(0, size - last_bytes))
                last = fh.read(last_bytes)
        except OSError:
            size, first, last = 0, b"", b""
        return size, base64.b64encode(first).decode("ascii"), base64.b64encode(last).decode("ascii")

    if not os.path.isdir(job_dir):
        print(marker + json.dumps({{"job_id": job_id, "state": "unknown"}}))
        return
    launch = load("launch.json") or {{}}
    spec = load({spec_file!r}) or {{}}
    state = load("state.json")
    supervisor = launch.get("supervisor_pid")
    final = ("completed", "failed", "timed_out", "cancelled")
    if state is None or state.get("state") not in final:
        started = (state or {{}}).get("started_at") or launch.get("launched_at") or time.time()
        overdue = time.time() > started + float(spec.get("timeout_s") or 0) + grace
        if cancel and alive(supervisor):
            os.kill(supervisor, signal.SIGTERM)
            waited = time.monotonic() + cancel_wait
            while time.monotonic() < waited:
                state = load("state.json")
                if state is not None and state.get("state") in final:
                    break
                if not alive(supervisor):  # ended without a final state (signalled before its handler)
                    state = load("state.json")
                    break
                time.sleep(0.02)
            reaped = time.monotonic() + 1.0
            while alive(supervisor) and time.monotonic() < reaped:  # let it exit, and reap it
                time.sleep(0.02)
        if state is None or state.get("state") not in final:
            if cancel:
                state = finish(state, ("cancelled", "supervisor_unresponsive"))
            elif not alive(supervisor):
                state = finish(state, ("failed", "supervisor_lost"))
            elif overdue:
                try:
                    os.killpg(supervisor, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                state = finish(state, ("timed_out", "supervisor_overdue"))
            else:  # its output so far: the last progress_bytes of each stream (already redacted here)
                out, err = head({stdout_file!r}, 0, progress_bytes), head({stderr_file!r}, 0, progress_bytes)
                print(marker + json.dumps({{"job_id": job_id, "state": "running", "started_at": started,
                                           "now": time.time(), "stdout_bytes": out[0],
                                           "stdout_tail_b64": out[2], "stderr_bytes": err[0],
                                           "stderr_tail_b64": err[2]}}))
                return
    out = head({stdout_file!r}, out_limit)
    err = head({stderr_file!r}, err_limit)
    state.update(stdout_bytes=out[0], stdout_b64=out[1], stderr_bytes=err[0], stderr_b64=err[1],
                 stderr_tail_b64=err[2], now=time.time(), language=spec.get("language"))
    # the job's files by count only: their names would pass the kernel's redactor here
    state["outputs_count"] = len(state.pop("outputs", None) or ())
    print(marker + json.dumps(state))


_sbx_job_status({job_id!r}, {cancel!r}, {out_limit!r}, {err_limit!r}, {tail_bytes!r}, {progress_bytes!r},
                {cancel_wait!r}, {grace!r}, {marker!r})
del _sbx_job_status
"""


@lru_cache(maxsize=1)
def runtime_sources() -> dict[str, str]:
    """File name -> source of the modules the job runtime needs inside the session."""
    return {
        jobs_runtime.RUNTIME_FILE: Path(jobs_runtime.__file__).read_text(encoding="utf-8"),
        jobs_runtime.CATALOGUE_FILE: Path(catalogue.__file__).read_text(encoding="utf-8"),
        jobs_runtime.STDIO_RUNTIME_FILE: Path(stdio_runtime.__file__).read_text(encoding="utf-8"),
        jobs_runtime.SHELL_RUNTIME_FILE: Path(shell_runtime.__file__).read_text(encoding="utf-8"),
        jobs_runtime.NODE_RUNTIME_FILE: Path(node_runtime.__file__).read_text(encoding="utf-8"),
    }


def _checked(job_id: str) -> str:
    if not JOB_ID_RE.match(job_id):
        raise ValueError("job ids are [A-Za-z0-9_-]{1,64}")
    return job_id


@lru_cache(maxsize=1)
def runtime_version() -> str:
    """Content hash of the runtime files: a session re-installs them only when they changed."""
    digest = hashlib.sha256()
    for name, text in sorted(runtime_sources().items()):
        digest.update(name.encode() + b"\0" + text.encode("utf-8") + b"\0")
    return digest.hexdigest()[:16]


def submit_source(
    job_id: str,
    code: str,
    timeout_s: int,
    values: Iterable[str] = (),
    *,
    with_runtime: bool = True,
    language: str = CODE_LANGUAGE,
) -> str:
    """The launcher. Without the runtime (`with_runtime=False`, ~5 KB instead of ~55 KB) it
    answers `runtime_missing` unless this runtime version is already installed in the session.
    `language` "bash": `code` is a shell script, run by the runtime's shell module;
    "javascript" / "typescript": a Node.js program, run by the runtime's Node.js runner."""
    _checked(job_id)
    return _SUBMIT.format(
        dir_name=JOBS_DIR_NAME,
        code_file=jobs_runtime.CODE_FILE,
        spec_file=jobs_runtime.SPEC_FILE,
        runtime_file=jobs_runtime.RUNTIME_FILE,
        job_id=job_id,
        code_b64=base64.b64encode(code.encode("utf-8")).decode("ascii"),
        language=language if language in LANGUAGES else CODE_LANGUAGE,
        timeout_s=int(timeout_s),
        sources=runtime_sources() if with_runtime else None,
        version=runtime_version(),
        values=tuple(v for v in values if v),
        marker=JOB_MARKER,
        files=JOB_FILES,
    )


def status_source(job_id: str, *, out_limit: int, err_limit: int, cancel: bool = False) -> str:
    _checked(job_id)
    return _STATUS.format(
        dir_name=JOBS_DIR_NAME,
        spec_file=jobs_runtime.SPEC_FILE,
        stdout_file=jobs_runtime.STDOUT_FILE,
        stderr_file=jobs_runtime.STDERR_FILE,
        job_id=job_id,
        cancel=bool(cancel),
        out_limit=int(out_limit),
        err_limit=int(err_limit),
        tail_bytes=TAIL_BYTES,
        progress_bytes=limits.JOB_PROGRESS_TAIL_BYTES,
        cancel_wait=CANCEL_WAIT_SECONDS,
        grace=DEADLINE_GRACE_SECONDS,
        marker=JOB_MARKER,
    )


def parse_marker(stdout: str) -> dict[str, Any] | None:
    """The last JOB_MARKER line's JSON object, or None if there is none or it does not parse."""
    found: dict[str, Any] | None = None
    for line in stdout.splitlines():
        if line.startswith(JOB_MARKER):
            try:
                value = json.loads(line[len(JOB_MARKER) :])
            except ValueError:
                return None
            found = value if isinstance(value, dict) else None
    return found
