"""Stream parsing and classification through the unmodified boto3 client and real frames."""

from __future__ import annotations

import pytest

from infra.local import eventstream as es
from tests.support.requests import execute_request, outcome_of

SESSION = "sess0001"
REQUEST = execute_request(agent_id="agent", template_id="tpl", turn_id="turn", call_id="call", code="x")


def _response(result) -> dict:
    """The agent response dispatch renders from a runner result."""
    return outcome_of(result, REQUEST).response()


def test_execute_structured_only_returns_output_and_ok(fake_agentcore, make_runner):
    # Given a structured terminal event
    fake_agentcore.script_invoke(fake_agentcore.result(stdout="2\n", stderr="", exit_code=0))
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "print(1+1)")
    # Then
    assert (result.exit_status, result.exit_code, result.stdout, result.stderr) == ("ok", 0, "2\n", "")
    assert (result.stdout_bytes, result.stderr_bytes) == (2, 0)
    assert result.error is None and result.error_message is None and result.failure_reason is None
    assert result.failure() is None
    assert result.session_stopped is False


def test_execute_text_only_falls_back_to_text_blocks(fake_agentcore, make_runner):
    # Given no structured content at all, output in two text blocks
    fake_agentcore.script_invoke(fake_agentcore.result(text=["hello ", "world\n"], structured=False))
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "print('hello world')")
    # Then
    assert result.exit_status == "ok"
    assert result.stdout == "hello world\n"
    assert result.stdout_bytes == 12
    assert result.exit_code is None


def test_execute_text_then_structured_counts_output_once(fake_agentcore, make_runner):
    # Given text blocks in an early event and the same output again as structured content
    fake_agentcore.script_invoke(
        fake_agentcore.Invoke(
            frames=[
                es.result_frame(text=["abc\n"], structured=False),
                es.result_frame(text=["abc\n"], stdout="abc\n", stderr="", exit_code=0),
            ]
        )
    )
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "print('abc')")
    # Then the structured content alone is the output
    assert result.stdout == "abc\n"
    assert result.stdout_bytes == 4


def test_execute_last_structured_event_is_authoritative(fake_agentcore, make_runner):
    # Given two structured events
    fake_agentcore.script_invoke(
        fake_agentcore.Invoke(
            frames=[
                es.result_frame(stdout="partial", exit_code=None),
                es.result_frame(stdout="final\n", stderr="", exit_code=0),
            ]
        )
    )
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then
    assert (result.stdout, result.exit_code, result.exit_status) == ("final\n", 0, "ok")


def test_execute_is_error_is_an_error(fake_agentcore, make_runner):
    # Given a result flagged isError with exit code 0
    fake_agentcore.script_invoke(fake_agentcore.result(stdout="", stderr="boom", exit_code=0, is_error=True))
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then
    assert (result.exit_status, result.error, result.failure_reason) == ("error", "SandboxError", "is_error")
    assert result.stderr == "boom"


def test_execute_is_error_text_only_goes_to_stderr(fake_agentcore, make_runner):
    # Given an error result with text only
    fake_agentcore.script_invoke(
        fake_agentcore.result(text=["NameError: x\n"], structured=False, is_error=True)
    )
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then
    assert result.exit_status == "error"
    assert (result.stdout, result.stderr) == ("", "NameError: x\n")


def test_execute_stderr_without_exit_code_is_an_error(fake_agentcore, make_runner):
    # Given stderr and no exit code
    fake_agentcore.script_invoke(fake_agentcore.result(stdout="", stderr="Traceback...\n", exit_code=None))
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then
    assert (result.exit_status, result.failure_reason) == ("error", "stderr_without_exit_code")


def test_execute_stderr_with_exit_zero_is_ok(fake_agentcore, make_runner):
    # Given a warning on stderr and exit code 0
    fake_agentcore.script_invoke(
        fake_agentcore.result(stdout="1\n", stderr="DeprecationWarning: x\n", exit_code=0)
    )
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then
    assert result.exit_status == "ok"
    assert result.stderr == "DeprecationWarning: x\n"


def test_execute_nonzero_exit_is_an_error(fake_agentcore, make_runner):
    # Given exit code 1
    fake_agentcore.script_invoke(fake_agentcore.result(stdout="", stderr="ValueError: bad\n", exit_code=1))
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then
    assert (result.exit_status, result.exit_code, result.error) == ("error", 1, "SandboxError")
    assert "1" in result.error_message


def test_execute_exit_137_is_oom(fake_agentcore, make_runner):
    # Given the OOM killer's exit status
    fake_agentcore.script_invoke(fake_agentcore.result(stdout="", stderr="Killed\n", exit_code=137))
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then
    assert (result.exit_status, result.error) == ("oom", "SandboxOOM")
    assert _response(result)["error"] == "SandboxOOM"
    failure = result.failure()
    assert (failure.error, failure.fields["failure_reason"]) == ("SandboxOOM", "exit_code:137")


@pytest.mark.parametrize("exception_type", es.STREAM_EXCEPTION_TYPES)
def test_execute_stream_exception_is_a_failure_never_success(fake_agentcore, make_runner, exception_type):
    # Given some output, then an exception event in the stream
    fake_agentcore.script_invoke(
        fake_agentcore.Invoke(
            frames=[
                es.result_frame(text=["partial\n"], structured=False),
                es.exception_frame(exception_type, "stream broke"),
            ]
        )
    )
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then
    assert (result.exit_status, result.error) == ("error", "SandboxError")
    assert result.failure_reason == f"stream_exception:{exception_type}:stream broke"
    assert exception_type in result.error_message
    assert _response(result)["ok"] is False


def test_execute_stream_exception_after_structured_success_is_still_a_failure(fake_agentcore, make_runner):
    # Given a complete structured result followed by an exception event
    fake_agentcore.script_invoke(
        fake_agentcore.Invoke(
            frames=[
                es.result_frame(stdout="ok\n", exit_code=0),
                es.exception_frame("throttlingException", "x"),
            ]
        )
    )
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then
    assert result.exit_status == "error"
    assert result.stdout == "ok\n"


def test_execute_empty_stream_is_an_error(fake_agentcore, make_runner):
    # Given a stream with no events at all
    fake_agentcore.script_invoke(fake_agentcore.Invoke(frames=[]))
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then
    assert (result.exit_status, result.failure_reason) == ("error", "empty_stream")
    assert (result.stdout_bytes, result.stderr_bytes) == (0, 0)


def test_execute_oversized_text_is_bounded_truncated_and_counted(fake_agentcore, make_runner):
    # Given 2 000 text blocks of 1 000 bytes each (2 MB) and small caps
    block = "x" * 999 + "\n"
    fake_agentcore.script_invoke(fake_agentcore.result(text=[block] * 2000, structured=False))
    runner = make_runner(stdout_cap_bytes=10_000, stderr_cap_bytes=1_000, log_cap_bytes=50_000)
    # When
    result = runner.execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then the true size is reported, the visible part is cut at the cap, the log copy at the log cap
    assert result.stdout_bytes == 2_000_000
    assert result.stdout_truncated is True and result.stderr_truncated is False
    assert len(result.stdout.encode()) == 10_000
    assert len(result.full_stdout.encode()) == 50_000
    assert result.stdout == (block * 11)[:10_000]


def test_execute_exactly_at_cap_is_not_truncated(fake_agentcore, make_runner):
    # Given stdout of exactly the cap and stderr one byte over
    fake_agentcore.script_invoke(fake_agentcore.result(stdout="a" * 100, stderr="b" * 51, exit_code=0))
    # When
    result = make_runner(stdout_cap_bytes=100, stderr_cap_bytes=50).execute(
        fake_agentcore.INTERPRETER, SESSION, "x"
    )
    # Then
    assert (result.stdout_truncated, result.stderr_truncated) == (False, True)
    assert (result.stdout_bytes, result.stderr_bytes) == (100, 51)
    assert result.stderr == "b" * 50
    fields = _response(result)
    assert fields["stdout_truncated"] is False and fields["stderr_truncated"] is True


@pytest.mark.parametrize("cap", [10, 11, 12, 13])
def test_execute_multibyte_utf8_is_cut_on_a_character_boundary(fake_agentcore, make_runner, cap):
    # Given 3-byte and 4-byte characters straddling the cap
    text = "ab€€🙂🙂€"
    fake_agentcore.script_invoke(fake_agentcore.result(stdout=text, exit_code=0))
    # When
    result = make_runner(stdout_cap_bytes=cap).execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then the visible part is the longest whole-character prefix within the cap
    visible = result.stdout.encode("utf-8")
    assert len(visible) <= cap
    assert text.startswith(result.stdout)
    next_char = text[len(result.stdout)]
    assert len(visible) + len(next_char.encode()) > cap
    assert result.stdout_bytes == len(text.encode()) and result.stdout_truncated is True


def test_execute_event_nested_deeper_than_the_parser_goes_ends_the_session(fake_agentcore, make_runner):
    # Given an event stream whose result event is 60,000 nested brackets (no parser takes it)
    fake_agentcore.script_invoke(
        fake_agentcore.Invoke(frames=[es.event_payload_frame("result", b"[" * 60_000 + b"]" * 60_000)])
    )
    # When the code runs
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "print(1)")
    # Then it is a protocol error that failed the call and stopped its session (nothing of it is trusted)
    assert (result.exit_status, result.error) == ("error", "SandboxError")
    assert "protocol" in (result.failure_reason or ""), result.failure_reason
    assert result.session_stopped is True
    assert [r.session_id for r in fake_agentcore.ops("StopCodeInterpreterSession")] == [SESSION]
