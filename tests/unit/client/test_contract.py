"""The client spells every name it shares with dispatch exactly as dispatch does
(sandbox_client/contract.py holds the client's copies: the client cannot import sandbox_common)."""

from __future__ import annotations

import pytest
from sandbox_client import contract
from sandbox_common import aws, errors, files, limits, messages, turn_token
from sandbox_common import naming as n


@pytest.mark.parametrize(
    ("client_value", "dispatch_value"),
    [
        (contract.STATUS_TOOL_CALL, n.STATUS_TOOL_CALL),
        (contract.MAX_CODE_BYTES, limits.MAX_CODE_BYTES),
        (contract.MCP_SERVER_NAME, f"{n.PROJECT}-sandbox"),  # the server is named after the project
        (contract.INVALID_REQUEST, errors.SandboxInvalidRequest.__name__),
        (contract.PROVISIONING, errors.SandboxProvisioning.__name__),
        (contract.SANDBOX_ERROR, errors.SandboxError.__name__),
        (contract.FILE_ID_RE.pattern, files.FILE_ID_RE.pattern),
        (contract.FILE_NOT_FOUND, messages.FILE_NOT_FOUND),
        (contract.SINGLE_ATTEMPT, aws.SINGLE_ATTEMPT),
        (contract.TOKEN_BYTES, turn_token.TOKEN_BYTES),
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
