"""Host-side redaction (the runner's layer of docs/redaction.md): no token of any catalogue class
survives into a result field, whatever path it takes out of the sandbox."""

from __future__ import annotations

import dataclasses
import json

import pytest
from sandbox_common.errors import SandboxError
from sandbox_common.outcome import Outcome
from sandbox_common.redaction import catalogue, findings

from infra.local import eventstream as es
from tests.support.requests import execute_request, outcome_of

SESSION = "sess0001"
EXAMPLES = [(c.name, c.examples[0]) for c in catalogue.TOKEN_CLASSES]
REQUEST = execute_request(agent_id="agent", template_id="tpl", turn_id="turn", call_id="call", code="x")


def _outcome(result) -> Outcome:
    """The outcome dispatch builds from a runner result (it renders the response and audit row)."""
    return outcome_of(result, REQUEST)


def _secrets(example: str) -> list[str]:
    hits = findings.scan(example)
    assert hits, "precondition: the catalogue flags its own example"
    return [example[h.start : h.end] for h in hits]


def _everything(result) -> str:
    return (
        json.dumps(dataclasses.asdict(result))
        + json.dumps(_outcome(result).response())
        + json.dumps(_outcome(result).audit_row(30))
    )


def _assert_absent(secrets: list[str], text: str) -> None:
    for secret in secrets:
        assert secret not in text
        assert json.dumps(secret)[1:-1] not in text


@pytest.mark.parametrize(("name", "example"), EXAMPLES)
def test_redaction_token_in_structured_stdout_and_stderr(fake_agentcore, make_runner, name, example):
    # Given a token printed plainly to stdout, inside JSON, and in stderr
    stdout = f"value: {example}\n" + json.dumps({"data": {"token": example}}) + "\n"
    fake_agentcore.script_invoke(
        fake_agentcore.result(stdout=stdout, stderr=f"oops {example}\n", exit_code=1)
    )
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "print(secret)")
    # Then
    _assert_absent(_secrets(example), _everything(result))
    assert catalogue.REPLACEMENT in result.stdout and catalogue.REPLACEMENT in result.stderr
    assert result.stdout_bytes == len(stdout.encode())  # raw counts are pre-redaction


@pytest.mark.parametrize(("name", "example"), EXAMPLES)
def test_redaction_token_split_across_text_blocks(fake_agentcore, make_runner, name, example):
    # Given a token split over two text blocks in two separate events (text fallback path)
    secret = _secrets(example)[0]
    cut = example.index(secret) + len(secret) // 2
    fake_agentcore.script_invoke(
        fake_agentcore.Invoke(
            frames=[
                es.result_frame(text=["start ", example[:cut]], structured=False),
                es.result_frame(text=[example[cut:], " end\n"], structured=False),
            ]
        )
    )
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then
    _assert_absent([secret], _everything(result))


@pytest.mark.parametrize(("name", "example"), EXAMPLES)
def test_redaction_token_in_failure_messages(fake_agentcore, make_runner, name, example):
    # Given a stream exception whose message carries a token
    fake_agentcore.script_invoke(
        fake_agentcore.Invoke(frames=[es.exception_frame("validationException", example)])
    )
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then the failure reason is kept, minus the token
    assert result.failure_reason.startswith("stream_exception:validationException:")
    _assert_absent(_secrets(example), _everything(result))


@pytest.mark.parametrize(("name", "example"), EXAMPLES)
def test_redaction_token_in_start_error_message(fake_agentcore, make_runner, name, example):
    # Given a Start error message that echoes a token
    fake_agentcore.start_error = (400, "ValidationException", f"bad input {example}")
    # When
    with pytest.raises(SandboxError) as failed:
        make_runner().start_session(fake_agentcore.INTERPRETER)
    # Then
    _assert_absent(_secrets(example), failed.value.failure_reason + failed.value.message)


@pytest.mark.parametrize(("name", "example"), EXAMPLES)
def test_redaction_token_straddling_the_cap_leaves_no_prefix(fake_agentcore, make_runner, name, example):
    # Given a token that starts just before the stdout cap and ends after it
    secret = _secrets(example)[0]
    cap = 1000
    start = cap - len(secret) // 2
    stdout = "y" * (start - example.index(secret) - 1) + " " + example + "\n" + "z" * 5000
    fake_agentcore.script_invoke(fake_agentcore.result(stdout=stdout, exit_code=0))
    # When
    result = make_runner(stdout_cap_bytes=cap, stderr_cap_bytes=cap, log_cap_bytes=cap).execute(
        fake_agentcore.INTERPRETER, SESSION, "x"
    )
    # Then not even the part of the token before the cut is visible
    assert result.stdout_truncated is True
    for visible in (result.stdout, result.full_stdout):
        assert secret[: len(secret) // 2] not in visible
        assert secret[:8] not in visible


def test_redaction_with_registered_values(fake_agentcore, make_runner):
    # Given a Redactor with a registered exact value (in base64 form in the output)
    import base64

    value = "s3cr3t-value-that-is-long"
    encoded = base64.b64encode(value.encode()).decode()
    fake_agentcore.script_invoke(fake_agentcore.result(stdout=f"{value} {encoded}\n", exit_code=0))
    # When
    result = make_runner(redactor=catalogue.Redactor([value])).execute(
        fake_agentcore.INTERPRETER, SESSION, "x"
    )
    # Then
    assert value not in result.stdout and encoded not in result.stdout


def test_redaction_margin_covers_recognising_a_token():
    # Given / When / Then: the kept head beyond a cut always holds enough of a token that starts
    # before the cut for it to be recognised (the match then runs to the end of the head)
    from sandbox_runtime.runner.output import REDACTION_MARGIN_BYTES

    assert REDACTION_MARGIN_BYTES > catalogue.RECOGNITION_CHARS


@pytest.mark.parametrize("offset", [150, 180, 190, 196, 200, 230, 290])
def test_redaction_stream_error_token_at_the_old_200_char_cut_leaves_no_fragment(
    fake_agentcore, make_runner, offset
):
    # Given a stream exception message with a token crossing where the reason used to be cut
    # (200 chars of message; a `ghp_` + 16 head survived unredacted)
    token = "ghp_" + "Q7w9" * 9
    message = "m" * offset + " " + token + " tail"
    fake_agentcore.script_invoke(
        fake_agentcore.Invoke(frames=[es.exception_frame("validationException", message)])
    )
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, "x")
    # Then the reason was redacted before it was cut: no fragment longer than prefix + 4
    assert result.failure_reason.startswith("stream_exception:validationException:m")
    assert token[:9] not in _everything(result)


def test_redaction_long_token_in_start_error_redacted_before_the_reason_cut(fake_agentcore, make_runner):
    # Given a Start error whose message holds a token longer than the failure reason's cap
    token = "xoxb-" + "1234567890-" * 60
    fake_agentcore.start_error = (400, "ValidationException", f"bad input {token}")
    # When
    with pytest.raises(SandboxError) as failed:
        make_runner().start_session(fake_agentcore.INTERPRETER)
    # Then
    assert token[:10] not in failed.value.failure_reason + failed.value.message
    assert catalogue.REPLACEMENT in failed.value.failure_reason
