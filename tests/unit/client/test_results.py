"""Typed results of the agent client (sandbox_client/results.py): the fields dispatch answers, the
answer kept as sent, and which artifacts the model may see inline."""

from __future__ import annotations

import pytest
from sandbox_client.results import (
    IMAGE_PREVIEW_MAX_BYTES,
    PNG_SIGNATURE,
    TEXT_PREVIEW_MAX_BYTES,
    Artifact,
    ExecutionResult,
    JobResult,
    preview_of,
)

SUCCESS = {
    "ok": True,
    "stdout": "2\n",
    "stderr": "",
    "exit_status": "ok",
    "exit_code": 0,
    "duration_ms": 1842,
    "session_id": "S-1",
    "invocation_id": "inv-1",
    "stdout_bytes": 2,
    "stderr_bytes": 0,
    "stdout_truncated": False,
    "stderr_truncated": False,
    "files": [
        {
            "file_id": "file-" + "a" * 22,
            "filename": "figure-1.png",
            "bytes": 2048,
            "content_type": "image/png",
            "sha256": "ab" * 32,
            "created_at": "2026-11-23T10:00:00Z",
        },
        {"filename": "huge.bin", "skipped": "too_large"},
    ],
    "session_source": "warm",
}


def test_execution_result_types_a_success_and_keeps_the_answer() -> None:
    # Given dispatch's answer to a call that succeeded / When typed
    result = ExecutionResult.from_answer(SUCCESS)
    # Then every field the spec names is typed
    assert type(result) is ExecutionResult
    assert (result.ok, result.stdout, result.stderr, result.error, result.error_message) == (
        True,
        "2\n",
        "",
        None,
        None,
    )
    assert (result.exit_status, result.exit_code, result.duration_ms) == ("ok", 0, 1842)
    assert (result.invocation_id, result.session_id, result.stdout_bytes, result.stderr_bytes) == (
        "inv-1",
        "S-1",
        2,
        0,
    )
    assert [a.filename for a in result.files] == ["figure-1.png", "huge.bin"]
    assert result.files[0].stored and not result.files[1].stored
    # And the answer as sent, read like the dict it was (for code written against dict answers)
    assert result.raw is SUCCESS
    assert result["session_source"] == "warm" and result.get("missing", 7) == 7
    assert "session_source" in result and dict(result) == SUCCESS


def test_execution_result_types_a_failure() -> None:
    # Given a cap refusal / When typed / Then not ok, with the named class and the sentence
    result = ExecutionResult.from_answer(
        {
            "ok": False,
            "error": "SandboxCapExceeded",
            "error_message": "I've hit the hourly cap (cap: agent_hourly).",
            "exit_status": "cap_exceeded",
            "dimension": "agent_hourly",
            "duration_ms": 3,
        }
    )
    assert (result.ok, result.error, result.exit_status) == (False, "SandboxCapExceeded", "cap_exceeded")
    assert result.error_message == "I've hit the hourly cap (cap: agent_hourly)."
    assert result.stdout == "" and result.files == () and result["dimension"] == "agent_hourly"


@pytest.mark.parametrize(
    ("answer", "status", "running"),
    [
        (
            {"ok": True, "status": "running", "job_id": "job-1", "invocation_id": "i", "session_id": "S"},
            "running",
            True,
        ),
        ({"ok": True, "status": "running", "job_id": "job-1", "elapsed_ms": 1500}, "running", True),
        (
            {"ok": False, "status": "failed", "job_id": "job-1", "error": "SandboxError", "exit_code": 3},
            "failed",
            False,
        ),
        ({"ok": True, "status": "completed", "stdout": "done\n"}, "completed", False),
    ],
)
def test_job_answers_are_job_results(answer: dict[str, object], status: str, running: bool) -> None:
    # Given an answer about a background job / When typed / Then a JobResult with the job's fields
    result = ExecutionResult.from_answer(answer)
    assert isinstance(result, JobResult)
    assert (result.status, result.running, result.job_id) == (status, running, answer.get("job_id"))
    assert result.elapsed_ms == answer.get("elapsed_ms")


def test_job_result_of_a_refusal_without_job_fields() -> None:
    # Given get_job's refusal of an unknown job id / When typed as a job answer
    result = JobResult.of({"ok": False, "error": "SandboxInvalidRequest", "error_message": "no job"})
    # Then a job result that is neither running nor ok
    assert isinstance(result, JobResult) and not result.running and not result.ok
    assert result.job_id is None


@pytest.mark.parametrize(
    ("entry", "previewable"),
    [
        ({"content_type": "image/png", "bytes": IMAGE_PREVIEW_MAX_BYTES}, True),
        ({"content_type": "image/png", "bytes": IMAGE_PREVIEW_MAX_BYTES + 1}, False),
        ({"content_type": "text/csv", "bytes": TEXT_PREVIEW_MAX_BYTES}, True),
        ({"content_type": "application/json", "bytes": 10}, True),
        ({"content_type": "text/plain", "bytes": TEXT_PREVIEW_MAX_BYTES + 1}, False),
        ({"content_type": "application/octet-stream", "bytes": 10}, False),
        ({"content_type": "image/jpeg", "bytes": 10}, False),
        ({"content_type": "image/png", "bytes": 10, "skipped": "too_many"}, False),
    ],
)
def test_artifact_previewable_by_type_and_size(entry: dict[str, object], previewable: bool) -> None:
    # Given an artifact of a type and size / Then the model sees it inline only if small and of a kind
    artifact = Artifact.from_entry({"file_id": "file-" + "b" * 22, "filename": "x", **entry})
    assert artifact.previewable is previewable


def test_preview_of_checks_the_bytes_are_what_the_artifact_claims() -> None:
    png = Artifact.from_entry({"file_id": "f", "filename": "a.png", "content_type": "image/png", "bytes": 20})
    text = Artifact.from_entry(
        {"file_id": "f", "filename": "a.txt", "content_type": "text/plain", "bytes": 2}
    )
    # Given bytes with and without the PNG signature, UTF-8 text and bytes that are not UTF-8
    # Then a PNG preview only with the signature, a text preview only of UTF-8
    assert preview_of(png, PNG_SIGNATURE + b"rest") is not None
    assert preview_of(png, b"GIF89a") is None
    assert preview_of(text, "é\n".encode()).text == "é\n"  # type: ignore[union-attr]
    assert preview_of(text, b"\xff\xfe") is None
    assert preview_of(text, b"a" * (TEXT_PREVIEW_MAX_BYTES + 1)) is None


def test_running_job_result_carries_its_output_so_far() -> None:
    # Given get_job's answer for a running job with its tails
    answer = {
        "ok": True,
        "status": "running",
        "job_id": "job-1",
        "elapsed_ms": 1500,
        "stdout_tail": "step 3 of 10\n",
        "stderr_tail": "",
        "stdout_bytes": 13,
        "stderr_bytes": 0,
    }
    # When typed / Then the tails and the counts so far are fields
    result = ExecutionResult.from_answer(answer)
    assert isinstance(result, JobResult)
    assert (result.stdout_tail, result.stderr_tail) == ("step 3 of 10\n", "")
    assert (result.stdout_bytes, result.stderr_bytes) == (13, 0)


def test_execution_error_is_the_class_string_and_survives_copies() -> None:
    import copy
    import dataclasses
    import json
    import pickle

    from sandbox_client.results import ExecutionError

    # Given a failed run whose code raised ValueError
    answer = {
        "ok": False,
        "error": "SandboxError",
        "error_message": "The code raised ValueError: bad; see stderr for the traceback.",
        "exception": {"name": "ValueError", "value": "bad", "traceback": "Traceback ...\nValueError: bad\n"},
    }
    result = ExecutionResult.from_answer(answer)
    error = result.error
    # Then `error` reads as the class it always was, and says what was raised
    assert (
        isinstance(error, ExecutionError)
        and error == "SandboxError"
        and json.dumps(error) == '"SandboxError"'
    )
    assert (error.name, error.value) == ("ValueError", "bad")
    # And copies keep both (asdict deep-copies every field)
    for copied in (
        copy.deepcopy(error),
        pickle.loads(pickle.dumps(error)),
        dataclasses.asdict(result)["error"],
    ):
        assert copied == "SandboxError" and (copied.name, copied.value, copied.traceback) == (
            "ValueError",
            "bad",
            "Traceback ...\nValueError: bad\n",
        )
    # And a success has no error; an answer without `exception` names its class
    assert ExecutionResult.from_answer({"ok": True}).error is None
    plain = ExecutionResult.from_answer(
        {"ok": False, "error": "SandboxTimeout", "error_message": "late"}
    ).error
    assert plain is not None and (plain.name, plain.value, plain.traceback) == (
        "SandboxTimeout",
        "late",
        None,
    )
