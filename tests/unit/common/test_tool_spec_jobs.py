"""What the tool descriptions say about background jobs: one sentence says a job is a fresh process
of the session that shares its files, not its variables (the descriptions also say variables
persist between calls, and suggest a job for longer work: without it the two contradict)."""

from __future__ import annotations

import re

from sandbox_common.tool_spec import EXECUTE_CODE, RUN_COMMAND, tool_definitions


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text) if s]


def test_tool_spec_one_sentence_says_a_job_is_a_fresh_process_sharing_files_not_variables() -> None:
    # Given the tools the model sees
    definitions = {d["name"]: d for d in tool_definitions(("lookup",))}
    for name in (EXECUTE_CODE, RUN_COMMAND):
        sentences = _sentences(definitions[name]["description"])
        # When the sentences that speak of what a background job is are picked out
        about_jobs = [s for s in sentences if "background job" in s and "process" in s]
        # Then exactly one does, and it says fresh process, same files, not the variables
        assert len(about_jobs) == 1, (name, sentences)
        sentence = about_jobs[0]
        assert "fresh process" in sentence and "files" in sentence, sentence
        assert re.search(r"\bnot the variables\b", sentence), sentence


def test_tool_spec_execute_code_says_variables_persist_only_between_calls() -> None:
    # Given execute_code's description, then "variables persist" is said of calls, and the job
    # sentence right after the deadline's advice to use background says jobs do not share them
    description = next(d for d in tool_definitions() if d["name"] == EXECUTE_CODE)["description"]
    sentences = _sentences(description)
    persist = next(i for i, s in enumerate(sentences) if "persist" in s)
    background = next(i for i, s in enumerate(sentences) if "background: true" in s)
    job = next(i for i, s in enumerate(sentences) if "fresh process" in s)
    assert re.search(r"persist between (Python )?calls", sentences[persist]), sentences[persist]
    assert persist < background < job == background + 1
