"""Typed results of the agent client: what dispatch answered, as dataclasses.

`ExecutionResult` is one execute_code answer (also a `run_command`); `JobResult` one answer about a
background job (submit, get_job, cancel_job, wait), which adds the job's fields; `Artifact` one
entry of an answer's `files` (docs/files.md). `raw` is the answer exactly as dispatch sent it (every field,
also those not typed here); `result["stdout"]`, `result.get(...)` and `"x" in result` read it, so
code that reads an answer as a dict works with them.

`Preview` is an artifact the model can see inline: a PNG of at most `IMAGE_PREVIEW_MAX_BYTES`, or
a text of at most `TEXT_PREVIEW_MAX_BYTES` that decodes as UTF-8 (larger ones reach the model as
links only). `SandboxTurn.previews` fetches their bytes through dispatch's get_file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

IMAGE_PREVIEW_MAX_BYTES = 1024 * 1024
TEXT_PREVIEW_MAX_BYTES = 16 * 1024
PNG_TYPE = "image/png"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_TEXT_TYPES = ("application/json", "application/xml", "application/csv", "application/javascript")
# statuses of an answer about a background job (docs/jobs.md); the final ones end it
FINAL_JOB_STATUSES = frozenset({"completed", "failed", "timed_out", "cancelled"})
JOB_STATUSES = FINAL_JOB_STATUSES | {"running"}


def is_texty(content_type: str | None) -> bool:
    """A content type whose bytes are text when they decode as UTF-8."""
    kind = (content_type or "").split(";")[0].strip().lower()
    return kind.startswith("text/") or kind in _TEXT_TYPES or kind.endswith("+json") or kind.endswith("+xml")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class Artifact:
    """One entry of an answer's `files`: a stored artifact, or one listed as `skipped`."""

    filename: str
    file_id: str | None = None
    bytes: int | None = None
    content_type: str | None = None
    sha256: str | None = None
    created_at: str | None = None
    skipped: str | None = None  # too_many | too_large: listed, not stored

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> Artifact:
        return cls(
            filename=str(entry.get("filename") or entry.get("file_id") or ""),
            file_id=_str(entry.get("file_id")),
            bytes=_int(entry.get("bytes")),
            content_type=_str(entry.get("content_type")),
            sha256=_str(entry.get("sha256")),
            created_at=_str(entry.get("created_at")),
            skipped=_str(entry.get("skipped")),
        )

    @property
    def stored(self) -> bool:
        return bool(self.file_id) and not self.skipped

    @property
    def previewable(self) -> bool:
        """Small enough, and of a kind, for the model to see inline (before its bytes are read)."""
        if not self.stored or self.bytes is None:
            return False
        if self.content_type == PNG_TYPE:
            return self.bytes <= IMAGE_PREVIEW_MAX_BYTES
        return is_texty(self.content_type) and self.bytes <= TEXT_PREVIEW_MAX_BYTES


class ExecutionError(str):
    """The `error` of a result with `ok` false: the named class dispatch answered (`SandboxError`,
    `SandboxTimeout`, `SandboxOOM`; it compares equal to that string, as `error` always did), and,
    like a notebook's error output or E2B's `Execution.error`, what the code raised: `name`
    (`ValueError`), `value` (its message) and `traceback` (as printed, redacted) — from the answer's
    `exception`, which dispatch fills when the code ended with an uncaught exception. For a failure
    without one (a timeout, a non-zero exit, a killed process) `name` is the class, `value` the
    sentence and `traceback` None."""

    name: str
    value: str
    traceback: str | None

    def __new__(
        cls, error_class: str, *, name: str | None = None, value: str = "", traceback: str | None = None
    ) -> ExecutionError:
        self = super().__new__(cls, error_class)
        self.name, self.value, self.traceback = name or str(error_class), value, traceback
        return self

    def __getnewargs_ex__(self) -> tuple[tuple[str], dict[str, Any]]:
        # copy, deepcopy (dataclasses.asdict) and pickle rebuild it with its fields
        return (str(self),), {"name": self.name, "value": self.value, "traceback": self.traceback}

    @classmethod
    def of(cls, answer: dict[str, Any]) -> ExecutionError | None:
        error = _str(answer.get("error"))
        if error is None:
            return None
        exception = answer.get("exception")
        if isinstance(exception, dict) and isinstance(exception.get("name"), str):
            return cls(
                error,
                name=exception["name"],
                value=_str(exception.get("value")) or "",
                traceback=_str(exception.get("traceback")),
            )
        return cls(error, name=error, value=_str(answer.get("error_message")) or "")

    def __repr__(self) -> str:
        return f"ExecutionError({str(self)!r}, name={self.name!r}, value={self.value!r})"


@dataclass(frozen=True)
class ExecutionResult:
    """One execute_code (or run_command) answer: the code ran. `ok` false: `error` is the named
    class with what the code raised (`ExecutionError`), `error_message` the sentence to relay.
    (A call dispatch refused raises `errors.SandboxRefused` instead.)"""

    ok: bool
    stdout: str = ""
    stderr: str = ""
    files: tuple[Artifact, ...] = ()
    error: ExecutionError | None = None
    error_message: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    status: str | None = None  # tool_call while paused at a tool call; a job's status
    exit_status: str | None = None  # ok | error | timeout | oom | cap_exceeded | provisioning
    exit_code: int | None = None
    duration_ms: int | None = None
    invocation_id: str | None = None
    session_id: str | None = None
    stdout_bytes: int | None = None
    stderr_bytes: int | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    reason: str | None = None  # why, for some failures (tenant_disabled, call_in_progress, ...)
    tool_calls: int | None = None  # calls of the agent's tools the code made

    @staticmethod
    def from_answer(answer: dict[str, Any]) -> ExecutionResult:
        """The typed form of a dispatch answer: a JobResult when it is about a background job."""
        if answer.get("job_id") or answer.get("status") in JOB_STATUSES:
            return JobResult.of(answer)
        return ExecutionResult(**_fields(answer))

    @property
    def previewable(self) -> list[Artifact]:
        return [a for a in self.files if a.previewable]

    # --- read access to the answer as sent (for code written against the dict answers) --------
    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.raw

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def keys(self) -> Any:
        return self.raw.keys()


@dataclass(frozen=True)
class JobResult(ExecutionResult):
    """An answer about a background job: `status` running (with `elapsed_ms`) or final
    (completed | failed | timed_out | cancelled, with the execute_code fields)."""

    job_id: str | None = None
    elapsed_ms: int | None = None
    # A running job's output so far (the last ≤ 32 KiB of each stream, redacted); None otherwise.
    stdout_tail: str | None = None
    stderr_tail: str | None = None

    @staticmethod
    def of(answer: dict[str, Any]) -> JobResult:
        """Any answer to a job action (a refusal without job fields too) as a JobResult."""
        return JobResult(
            **_fields(answer),
            job_id=_str(answer.get("job_id")),
            elapsed_ms=_int(answer.get("elapsed_ms")),
            stdout_tail=_str(answer.get("stdout_tail")),
            stderr_tail=_str(answer.get("stderr_tail")),
        )

    @property
    def running(self) -> bool:
        return self.status == "running"


def _fields(answer: dict[str, Any]) -> dict[str, Any]:
    return {
        "ok": answer.get("ok") is True,
        "stdout": _str(answer.get("stdout")) or "",
        "stderr": _str(answer.get("stderr")) or "",
        "files": tuple(Artifact.from_entry(f) for f in answer.get("files") or () if isinstance(f, dict)),
        "error": ExecutionError.of(answer),
        "error_message": _str(answer.get("error_message")),
        "raw": answer,
        "status": _str(answer.get("status")),
        "exit_status": _str(answer.get("exit_status")),
        "exit_code": _int(answer.get("exit_code")),
        "duration_ms": _int(answer.get("duration_ms")),
        "invocation_id": _str(answer.get("invocation_id")),
        "session_id": _str(answer.get("session_id")),
        "stdout_bytes": _int(answer.get("stdout_bytes")),
        "stderr_bytes": _int(answer.get("stderr_bytes")),
        "stdout_truncated": answer.get("stdout_truncated") is True,
        "stderr_truncated": answer.get("stderr_truncated") is True,
        "reason": _str(answer.get("reason")),
        "tool_calls": _int(answer.get("tool_calls")),
    }


@dataclass(frozen=True)
class Preview:
    """An artifact's bytes for the model to see inline: `kind` image (PNG) or text."""

    artifact: Artifact
    kind: str  # image | text
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8")


def preview_of(artifact: Artifact, data: bytes) -> Preview | None:
    """The preview of an artifact whose bytes (sha256 checked) are `data`, or None when they are not
    what it claims (a PNG without the signature, text that is not UTF-8) or too large."""
    if artifact.content_type == PNG_TYPE:
        if len(data) <= IMAGE_PREVIEW_MAX_BYTES and data.startswith(PNG_SIGNATURE):
            return Preview(artifact, "image", data)
        return None
    if len(data) > TEXT_PREVIEW_MAX_BYTES:
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return Preview(artifact, "text", data)
