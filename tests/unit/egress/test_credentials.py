"""The session's proxy credential: parsing the header, and what a stored credential admits."""

from __future__ import annotations

import base64

import pytest
from egress_proxy import checks
from egress_proxy.credentials import Credential, Presented, parse_proxy_authorization, secret_sha256, verify

SECRET = "a-secret-of-the-session"


def _basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


def _credential(**changes: object) -> Credential:
    fields = {
        "session_id": "sess-1",
        "tenant_id": "acme",
        "environment": "default-allowlist",
        "secret_sha256": secret_sha256(SECRET),
        "expires_at": 2_000,
        "source": "127.77.0.1",
    }
    fields.update(changes)
    return Credential(**fields)  # type: ignore[arg-type]


def test_parse_proxy_authorization_reads_basic_session_and_secret() -> None:
    assert parse_proxy_authorization(_basic(f"sess-1:{SECRET}")) == Presented("sess-1", SECRET)
    assert parse_proxy_authorization("basic " + _basic("s:x").split(" ")[1]) == Presented("s", "x")


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer abc",
        "Basic",
        "Basic !!!notbase64",
        _basic("no-colon"),
        _basic(":secret"),
        _basic("bad id!:x"),
        _basic("s:"),
        _basic("s:" + "x" * 300),
    ],
)
def test_parse_proxy_authorization_refuses_anything_else(header: str | None) -> None:
    assert parse_proxy_authorization(header) is None


def test_verify_admits_the_bound_secret_from_its_source() -> None:
    assert verify(_credential(), Presented("sess-1", SECRET), peer="127.77.0.1", now=1_000) is None


@pytest.mark.parametrize(
    ("credential", "presented", "peer", "binding", "reason"),
    [
        (None, Presented("sess-1", SECRET), "127.77.0.1", False, checks.CREDENTIAL_INVALID),
        (_credential(), Presented("sess-1", "wrong"), "127.77.0.1", False, checks.CREDENTIAL_INVALID),
        (
            _credential(revoked=True),
            Presented("sess-1", SECRET),
            "127.77.0.1",
            False,
            checks.CREDENTIAL_REVOKED,
        ),
        (
            _credential(expires_at=999),
            Presented("sess-1", SECRET),
            "127.77.0.1",
            False,
            checks.CREDENTIAL_EXPIRED,
        ),
        (_credential(), Presented("sess-1", SECRET), "127.77.0.2", False, checks.WRONG_SOURCE),
        (_credential(), Presented("sess-1", SECRET), "127.77.0.2", True, checks.BIND_CONFLICT),
        (
            _credential(source=None),
            Presented("sess-1", SECRET),
            "127.77.0.2",
            False,
            checks.CREDENTIAL_UNBOUND,
        ),
    ],
)
def test_verify_refuses_with_the_reason(
    credential: Credential | None, presented: Presented, peer: str, binding: bool, reason: str
) -> None:
    assert verify(credential, presented, peer=peer, now=1_000, binding=binding) == reason


def test_verify_admits_an_unbound_credential_only_to_bind() -> None:
    unbound = _credential(source=None)
    assert verify(unbound, Presented("sess-1", SECRET), peer="127.77.0.9", now=1_000, binding=True) is None


def test_credential_from_an_item_without_what_it_needs_admits_nothing() -> None:
    item = {"tenant_id": "acme", "environment": "default-allowlist", "secret_sha256": "x", "expires_at": 5}
    assert Credential.from_item("s", item) is not None
    for missing in item:
        assert Credential.from_item("s", {k: v for k, v in item.items() if k != missing}) is None
    assert Credential.from_item("s", {**item, "environment": "nowhere"}) is None
    assert Credential.from_item("s", {**item, "revoked_at": 3}).revoked  # type: ignore[union-attr]
