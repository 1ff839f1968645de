"""§14.2 host-side redaction of artifacts (§8 layer 2): text artifacts are redacted exactly as the
catalogue redacts the whole decoded text, computed chunk by chunk on the bytes; anything that is
not UTF-8 is stored byte-exact."""

from __future__ import annotations

import pytest
from dispatch import artifacts
from dispatch.artifacts import redact_artifact
from sandbox_common.redaction.catalogue import REPLACEMENT, redact

from tests.benchmarks.test_host_redaction import TOKENS, realistic_stdout


@pytest.fixture(params=[4096, 65536], ids=["small-chunks", "default-chunks"])
def chunk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(artifacts, "REDACT_CHUNK_BYTES", request.param)
    return int(request.param)


def test_redact_artifact_equals_whole_text_redaction(chunk: int) -> None:
    # Given 1 MiB of realistic non-ASCII text with every token shape, one at each chunk edge too
    text = realistic_stdout(1024 * 1024)
    text = TOKENS[0] + "\n" + text[: chunk - 5] + TOKENS[1] + text[chunk - 5 :] + " ".join(TOKENS)
    # When redacted as an artifact
    stored, changed = redact_artifact(text.encode())
    # Then it is byte for byte the catalogue's redaction of the whole text, and no token is left
    assert changed is True
    assert stored == redact(text).encode()
    assert not any(t.encode() in stored for t in TOKENS)
    assert stored.count(REPLACEMENT.encode()) >= len(TOKENS) + 2


def test_redact_artifact_clean_text_is_the_same_object(chunk: int) -> None:
    # Given clean text
    data = ("région,total\neu,8\n" * 20_000).encode()
    # When redacted / Then nothing changed and no copy was made
    stored, changed = redact_artifact(data)
    assert changed is False and stored is data


def test_redact_artifact_binary_is_byte_exact() -> None:
    # Given bytes that are not UTF-8 but contain a token shape
    data = b"\x89PNG\r\n\x1a\n" + TOKENS[0].encode() + bytes(range(256))
    # When redacted / Then stored unchanged (binary is never rewritten)
    stored, changed = redact_artifact(data)
    assert changed is False and stored == data


def test_redact_artifact_utf8_cut_inside_a_character_is_binary() -> None:
    # Given text whose last character is cut in half (not UTF-8 decodable)
    data = ("é" * 10 + TOKENS[0]).encode() + "é".encode()[:1]
    # When redacted / Then it is treated as binary: byte-exact
    assert redact_artifact(data) == (data, False)
