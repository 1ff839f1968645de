"""Job snippets (functions/sandbox_runtime/runner/job_snippets.py): what travels into the session."""

from __future__ import annotations

import base64

import pytest
from sandbox_runtime.runner import job_snippets as js


@pytest.mark.parametrize("job_id", ["../etc", "a/b", "", "x" * 65, "job id"])
def test_job_snippets_refuse_ids_that_are_not_plain_names(job_id: str) -> None:
    # Given an id that could escape the jobs directory, when a snippet is built, then it is refused
    with pytest.raises(ValueError):
        js.submit_source(job_id, "print(1)", 10)
    with pytest.raises(ValueError):
        js.status_source(job_id, out_limit=10, err_limit=10)


def test_job_snippets_carry_user_code_as_exact_data_never_as_source() -> None:
    # Given code with quotes, newlines, non-ASCII and a would-be injection
    code = "print('''x''')\n\"\"\"); import os  # é ✓\n"
    # When the submit snippet is built
    source = js.submit_source("job-1", code, 10)
    # Then the code appears only as its base64, which decodes to the exact bytes
    encoded = base64.b64encode(code.encode("utf-8")).decode("ascii")
    assert encoded in source
    assert code not in source
    assert base64.b64decode(encoded) == code.encode("utf-8")


def test_job_snippets_parse_marker_takes_the_last_marker_line() -> None:
    # Given output with noise and two marker lines, when parsed, then the last one wins
    out = f'noise\n{js.JOB_MARKER}{{"state": "running"}}\n{js.JOB_MARKER}{{"state": "completed"}}\n'
    assert js.parse_marker(out) == {"state": "completed"}
    assert js.parse_marker("no marker here\n") is None
    assert js.parse_marker(f"{js.JOB_MARKER}not json\n") is None
