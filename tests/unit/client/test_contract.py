"""The client spells every name it shares with dispatch exactly as dispatch does
(sandbox_client/contract.py holds the client's copies: the client cannot import sandbox_common)."""

from __future__ import annotations

import pytest
from sandbox_client import contract
from sandbox_common import aws, errors, files, limits, messages, models, tool_spec, turn_token
from sandbox_common import naming as n


@pytest.mark.parametrize(
    ("client_value", "dispatch_value"),
    [
        (contract.STATUS_TOOL_CALL, n.STATUS_TOOL_CALL),
        (contract.MAX_CODE_BYTES, limits.MAX_CODE_BYTES),
        (contract.MCP_SERVER_NAME, f"{n.PROJECT}-sandbox"),  # the server is named after the project
        (contract.INVALID_REQUEST, errors.SandboxInvalidRequest.__name__),
        (contract.PROVISIONING, errors.SandboxProvisioning.__name__),
        (contract.CAP_EXCEEDED, errors.SandboxCapExceeded.__name__),
        (contract.SANDBOX_ERROR, errors.SandboxError.__name__),
        (contract.REASON_TURN_TOKEN_MISMATCH, n.REASON_TURN_TOKEN_MISMATCH),
        (contract.FILE_ID_RE.pattern, files.FILE_ID_RE.pattern),
        (contract.FILE_NOT_FOUND, messages.FILE_NOT_FOUND),
        (contract.SINGLE_ATTEMPT, aws.SINGLE_ATTEMPT),
        (contract.TOKEN_BYTES, turn_token.TOKEN_BYTES),
        (contract.EXECUTE_CODE, tool_spec.EXECUTE_CODE),
        (contract.RUN_COMMAND, tool_spec.RUN_COMMAND),
        (contract.GET_JOB, tool_spec.GET_JOB),
        (contract.CANCEL_JOB, tool_spec.CANCEL_JOB),
        (contract.COMMAND_LANGUAGE, tool_spec.COMMAND_LANGUAGE),
        # the job tools are dispatch's job actions of the same names
        (contract.GET_JOB, models.GetJobRequest.model_fields["action"].annotation.__args__[0]),  # type: ignore[union-attr]
        (contract.CANCEL_JOB, models.CancelJobRequest.model_fields["action"].annotation.__args__[0]),  # type: ignore[union-attr]
    ],
)
def test_contract_name_equals_dispatchs_own(client_value: object, dispatch_value: object) -> None:
    # Given a name both sides spell / Then the client's copy is dispatch's value
    assert client_value == dispatch_value


def test_contract_new_token_is_one_dispatch_accepts() -> None:
    # Given tokens the client generates / Then each is well formed for dispatch, and they differ
    tokens = {contract.new_token() for _ in range(20)}
    assert len(tokens) == 20
    assert all(turn_token.is_well_formed(t) for t in tokens)


def test_the_client_holds_no_sentence_of_the_tool_definitions() -> None:
    # Given every sentence the model reads about the tools (built once, in sandbox_common.tool_spec)
    from pathlib import Path

    import sandbox_client

    sentences = [
        value.split("{")[0].strip()
        for name, value in vars(tool_spec).items()
        if name.isupper() and isinstance(value, str) and len(value) > 30
    ]
    assert len(sentences) >= 10  # the loop below must check the descriptions' sentences
    # When the client's sources are read / Then none of them is spelled there: it serves begin_turn's
    sources = {p.name: p.read_text() for p in Path(sandbox_client.__file__).parent.glob("*.py")}
    assert [(s, f) for s in sentences for f, text in sources.items() if s[:40] in text] == []


def test_the_packaged_definitions_are_dispatchs_with_the_default_figures() -> None:
    # Given the copy the client packages (its MCP server lists it before dispatch can be reached)
    from sandbox_client import definitions

    # Then it is exactly what begin_turn answers for a template without callable tools at the
    # default figures: `make client-definitions` rewrites it after tool_spec changes
    assert definitions.packaged() == tool_spec.tool_definitions(limits=tool_spec.SurfaceLimits()), (
        "the client's tool_definitions.json is stale: run `make client-definitions`"
    )
    assert [d["name"] for d in definitions.packaged()] == list(tool_spec.TOOL_NAMES)
