"""Background jobs for the agent client (docs/jobs.md), mixed into `turn.SandboxTurn`.

    job = turn.submit("import time; time.sleep(1200); print('done')", timeout_s=1800)
    result = turn.wait(job.job_id, progress=lambda r: print(r.elapsed_ms))

Every answer is a `results.JobResult`. `submit` answers at once (status running, job_id, ...);
`wait` polls `get_job` until the job is no longer running and returns its final result (the
execute_code fields plus `status`: completed | failed | timed_out | cancelled, also when the kill
switch cancelled it). A refusal (a cap at submit, an unknown job_id, another turn's token) raises
`errors.SandboxRefused`, as every call of the client does. Imports only the stdlib, like the
client itself.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from .errors import SandboxRefused, raise_refusal
from .results import ExecutionResult, JobResult, Preview

DEFAULT_POLL_SECONDS = 5.0


class JobsMixin:
    """Needs `_invoke(event) -> dict`, `_ids() -> dict`, `previews(result)` and `invocation_source`
    from its host."""

    _invoke: Callable[[dict[str, Any]], dict[str, Any]]
    _ids: Callable[[], dict[str, Any]]
    previews: Callable[[ExecutionResult], list[Preview]]
    invocation_source: str | None

    def submit(
        self,
        code: str,
        *,
        timeout_s: int | None = None,
        call_id: str | None = None,
        language: str | None = None,
    ) -> JobResult:
        """Start `code` as a background job in this turn's session; answers at once. `language` as
        for execute_code ("bash": a shell script; "javascript" / "typescript": a Node.js program)."""
        event = {
            "action": "execute_code",
            **self._ids(),
            "call_id": call_id or f"call-{uuid.uuid4().hex}",
            "code": code,
            "background": True,
        }
        if timeout_s is not None:
            event["timeout_s"] = timeout_s
        if language is not None:
            event["language"] = language
        if self.invocation_source:
            event["invocation_source"] = self.invocation_source
        return JobResult.of(raise_refusal(self._invoke(event)))

    def get_job(self, job_id: str) -> JobResult:
        return JobResult.of(raise_refusal(self._invoke(self._job_event("get_job", job_id))))

    def cancel_job(self, job_id: str) -> JobResult:
        return JobResult.of(raise_refusal(self._invoke(self._job_event("cancel_job", job_id))))

    def wait(
        self,
        job_id: str,
        *,
        progress: Callable[[JobResult], None] | None = None,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        timeout_s: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> JobResult:
        """Poll until the job ends; `progress(answer)` is called with every `running` answer.
        A refusal raises (get_job's); `timeout_s` bounds the wait (the job keeps running: the last
        `running` answer is returned)."""
        started = time.monotonic()
        while True:
            answer = self.get_job(job_id)
            if not answer.running:
                return answer
            if progress is not None:
                progress(answer)
            if timeout_s is not None and time.monotonic() - started >= timeout_s:
                return answer
            sleep(poll_seconds)

    def _job_event(self, action: str, job_id: str) -> dict[str, Any]:
        ids = self._ids()
        ids.pop("template_id", None)
        ids.pop("user_id", None)
        return {"action": action, **ids, "job_id": job_id}

    # --- Strands ----------------------------------------------------------------------------------
    def strands_job_tools(self) -> list[Any]:
        """Two Strands tools bound to this turn, kept for callers of before the one tool surface
        (`strands_tools()` serves execute_code with background, get_job and cancel_job as
        begin_turn defines them): start a background job, check (or wait for) one. Like every
        Strands tool of the client, an answer with `ok: false` is a Strands `status: "error"`."""
        try:
            from strands import tool

            from .strands_tool import strands_result
        except ImportError as exc:
            raise ImportError("strands_job_tools() needs the `strands-agents` package") from exc
        turn = self

        @tool(name="start_background_job")
        def start_background_job(code: str, timeout_s: int = 900) -> dict[str, Any]:
            """Start long-running Python (up to 3600 s) in the sandbox without waiting for it.

            Args:
                code: Python source to run as a background job.
                timeout_s: seconds after which the job is stopped (at most 3600).
            """
            answer: ExecutionResult
            try:
                answer = turn.submit(code, timeout_s=timeout_s)
            except SandboxRefused as refused:
                answer = refused.result
            return dict(strands_result(turn, "", answer))

        @tool(name="check_background_job")
        def check_background_job(job_id: str, wait_seconds: int = 0) -> dict[str, Any]:
            """Check a background job: its final result, or `running` with the elapsed time.

            Args:
                job_id: the id start_background_job returned.
                wait_seconds: wait up to this long for the job to end before answering.
            """
            answer: ExecutionResult
            try:
                if wait_seconds > 0:
                    answer = turn.wait(job_id, timeout_s=wait_seconds, poll_seconds=min(5.0, wait_seconds))
                else:
                    answer = turn.get_job(job_id)
            except SandboxRefused as refused:
                answer = refused.result
            return dict(strands_result(turn, "", answer))

        return [start_background_job, check_background_job]
