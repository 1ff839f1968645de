"""Turn token model pieces: shape, hash, constant-time check, token-less turns."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from sandbox_common import turn_token
from sandbox_common.turn_token import TurnTokenRejected, new_token, token_hash, verify


def test_new_token_is_43_urlsafe_chars_without_padding() -> None:
    # Given / When
    token = new_token()
    # Then
    assert len(token) == 43
    assert "=" not in token
    assert turn_token.is_well_formed(token)
    assert new_token() != token


@pytest.mark.parametrize(
    "candidate",
    [
        "a" * 42,
        "a" * 129,
        "a" * 42 + "=",
        "a" * 42 + "+",
        "a" * 42 + "/",
        "a" * 42 + " ",
        "é" * 43,
        12345,
        None,
    ],
)
def test_is_well_formed_rejects_bad_shapes(candidate: object) -> None:
    assert turn_token.is_well_formed(candidate) is False


@pytest.mark.parametrize("candidate", ["A" * 43, "A-_9" * 32])
def test_is_well_formed_accepts_43_to_128_chars(candidate: str) -> None:
    assert turn_token.is_well_formed(candidate)


def test_token_hash_is_lowercase_sha256_hex_of_the_token() -> None:
    token = new_token()
    assert token_hash(token) == hashlib.sha256(token.encode()).hexdigest()


def test_verify_first_action_binds_the_token_hash() -> None:
    token = new_token()
    assert verify(token, None, required=True) == token_hash(token)


def test_verify_same_token_later_passes() -> None:
    token = new_token()
    assert verify(token, token_hash(token), required=True) == token_hash(token)


@pytest.mark.parametrize(
    ("token", "stored", "required", "reason"),
    [
        (None, None, True, "missing"),  # first action without a token on a stage that requires one
        (None, "h" * 64, False, "missing"),  # later action of a bound turn without its token
        ("short", None, True, "malformed"),
        ("A" * 43, hashlib.sha256(b"B" * 43).hexdigest(), True, "mismatch"),  # another turn's token
        ("A" * 43, "", False, "unexpected"),  # a token-less turn cannot be taken over by a token
        (None, "", True, "missing"),  # the stage requires tokens again: token-less turns refused
    ],
)
def test_verify_refuses(token: str | None, stored: str | None, required: bool, reason: str) -> None:
    with pytest.raises(TurnTokenRejected) as caught:
        verify(token, stored, required=required)
    assert caught.value.reason == reason


def test_verify_tokenless_turn_on_optional_stage_stays_tokenless() -> None:
    # Given a stage with require_turn_token false, the first action without a token binds ""
    bound = verify(None, None, required=False)
    # Then later token-less actions pass and keep it token-less
    assert bound == ""
    assert verify(None, bound, required=False) == ""


def test_verify_compares_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a spy on hmac.compare_digest
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(turn_token.hmac, "compare_digest", spy)
    token = new_token()
    # When
    verify(token, token_hash(token), required=True)
    # Then the comparison went through compare_digest, on the hashes
    assert calls == [(token_hash(token).encode(), token_hash(token).encode())]
