"""Host-side redaction of artifacts: text artifacts are redacted exactly as the
catalogue redacts the whole decoded text, computed on the bytes part by part as they arrive
(`Assembly`); text that is not UTF-8 (single-byte encodings, invalid bytes, a UTF-16/32
byte-order mark) is redacted too; binary is stored byte-exact."""

from __future__ import annotations

import codecs
import hashlib
import time
import zlib

import pytest
from sandbox_common.redaction.catalogue import REPLACEMENT, redact
from sandbox_runtime.artifacts import CHUNK_BYTES, PNG_SIGNATURE, READ_BATCH_BYTES, redact_artifact
from sandbox_runtime.artifacts.collect import _read_artifact
from sandbox_runtime.artifacts.redact import Assembly
from sandbox_runtime.runner.tools import ToolFailed

from tests.benchmarks.test_host_redaction import TOKENS, realistic_stdout


@pytest.fixture(params=[None, 65536, 4093], ids=["one-block", "64KiB-blocks", "odd-blocks"])
def chunk(request: pytest.FixtureRequest) -> int | None:
    """How the bytes arrive: at once, or in parts (4093: cuts inside characters and lines)."""
    return request.param


def assemble(data: bytes, block: int | None) -> tuple[bytes, bool]:
    if block is None:
        return redact_artifact(data)
    assembly = Assembly()
    for start in range(0, len(data), block):
        assembly.feed(data[start : start + block])
    assert assembly.size == len(data) and assembly.sha256 == hashlib.sha256(data).hexdigest()
    return assembly.finish()


def test_redact_artifact_equals_whole_text_redaction(chunk: int) -> None:
    # Given 1 MiB of realistic non-ASCII text with every token shape, one at each chunk edge too
    text = realistic_stdout(1024 * 1024)
    edge = (chunk or 65536) - 5
    text = TOKENS[0] + "\n" + text[:edge] + TOKENS[1] + text[edge:] + " ".join(TOKENS)
    # When redacted as an artifact
    stored, changed = assemble(text.encode(), chunk)
    # Then it is byte for byte the catalogue's redaction of the whole text, and no token is left
    assert changed is True
    assert stored == redact(text).encode()
    assert not any(t.encode() in stored for t in TOKENS)
    assert stored.count(REPLACEMENT.encode()) >= len(TOKENS) + 2


def test_redact_artifact_clean_text_is_the_same_object(chunk: int) -> None:
    # Given clean text
    data = ("région,total\neu,8\n" * 20_000).encode()
    # When redacted / Then nothing changed and no copy was made
    stored, changed = assemble(data, chunk)
    assert changed is False and stored == data
    if chunk is None:
        assert stored is data


def test_redact_artifact_png_whose_chunks_do_not_parse_is_redacted_on_its_bytes() -> None:
    # Given bytes with a PNG's signature whose chunks do not parse, holding a token shape
    data = b"\x89PNG\r\n\x1a\n" + TOKENS[0].encode() + bytes(range(256))
    # When redacted / Then the token shape is replaced in place and every other byte kept (no
    # decoder reads it as an image whole, so no chunk of it is kept unread)
    stored, changed = redact_artifact(data)
    assert (stored, changed) == (data.replace(TOKENS[0].encode(), REPLACEMENT.encode()), True)


def test_redact_artifact_utf8_cut_inside_a_character_is_redacted_on_its_bytes() -> None:
    # Given text whose last character is cut in half (not UTF-8 decodable)
    data = ("é" * 10 + TOKENS[0]).encode() + "é".encode()[:1]
    # When redacted / Then the token is gone and every other byte, the cut one included, kept
    assert redact_artifact(data) == (("é" * 10 + REPLACEMENT).encode() + b"\xc3", True)


SINGLE_BYTE = {
    "latin-1": ("café résumé\nkey=" + TOKENS[0] + " naïve\n").encode("latin-1"),
    "cp1252": ("“quoted” — key=" + TOKENS[0] + " €5\n").encode("cp1252"),
    "utf-8-one-bad-byte": ("ok ✓\n" + TOKENS[0] + "\n").encode() + b"\xff\n",
}


@pytest.mark.parametrize("name", sorted(SINGLE_BYTE))
def test_redact_artifact_ascii_compatible_text_not_utf8_is_redacted(name: str, chunk: int | None) -> None:
    # Given a text artifact in an ASCII-compatible encoding other than UTF-8 holding a token
    data = SINGLE_BYTE[name]
    # When redacted (whole, or fed in parts)
    stored, changed = assemble(data, chunk)
    # Then the token is gone, replaced in place; the bytes around it are unchanged
    assert changed is True and TOKENS[0].encode() not in stored
    assert stored == data.replace(TOKENS[0].encode(), REPLACEMENT.encode())


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_redact_artifact_text_behind_a_byte_order_mark_is_redacted(codec: str, chunk: int | None) -> None:
    # Given a text artifact with a byte-order mark (UTF-16 either order, UTF-32) holding a token
    text = "région,clé\nacme," + TOKENS[0] + "\n"
    bom = {"utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE}.get(codec, b"")
    data = bom + text.encode(codec)
    # When redacted
    stored, changed = assemble(data, chunk)
    # Then it is the same encoding, same mark, with the token replaced
    assert changed is True
    assert stored == bom + redact(text).encode(codec)
    assert TOKENS[0] not in stored.decode("utf-16" if "16" in codec else "utf-32")


def test_redact_artifact_utf16_with_a_lone_surrogate_and_odd_tail_is_still_redacted() -> None:
    # Given UTF-16-LE text with an unpaired surrogate and a last odd byte
    data = codecs.BOM_UTF16_LE + ("x" + TOKENS[0] + " ").encode("utf-16-le") + b"\x00\xd8" + b"!"
    # When redacted / Then the token is gone and the odd parts are kept byte for byte
    stored, changed = redact_artifact(data)
    assert changed is True
    assert stored == codecs.BOM_UTF16_LE + ("x" + REPLACEMENT + " ").encode("utf-16-le") + b"\x00\xd8!"


def test_redact_artifact_binary_with_nul_bytes_is_byte_exact() -> None:
    # Given binary data (NUL bytes, no byte-order mark) holding a token shape
    data = b"\x00\x01binary" + TOKENS[0].encode() + bytes(range(256))
    # When redacted / Then stored unchanged
    assert redact_artifact(data) == (data, False)


@pytest.mark.parametrize("block", [1, 2, 3, 5])
def test_assembly_non_ascii_cut_anywhere_stays_text(block: int) -> None:
    # Given non-ASCII text with a token, fed in blocks that cut its characters
    text = "é✓\U0001f600 x " + TOKENS[0] + " ü\nnext line é\n"
    # When / Then it is redacted as text, wherever the cuts fall
    assert assemble(text.encode(), block) == (redact(text).encode(), True)


def test_assembly_invalid_utf8_in_a_late_part_is_still_redacted() -> None:
    # Given text with a token in its first part and a byte that is never UTF-8 in its last
    data = (TOKENS[0] + "\n" + "row\n" * 40_000).encode() + b"\xff tail"
    # When fed in parts / Then the token is redacted and the invalid byte kept
    assert assemble(data, 65536) == (data.replace(TOKENS[0].encode(), REPLACEMENT.encode()), True)


def test_assembly_last_line_without_newline_is_redacted() -> None:
    # Given clean lines, then a last line holding a token and no newline
    text = "clean\n" * 1000 + "key " + TOKENS[0]
    # When / Then
    assert assemble(text.encode(), 4093) == (redact(text).encode(), True)


def test_assembly_cut_character_followed_by_an_ascii_part_is_binary() -> None:
    # Given a character's lead byte ending one part, an ASCII part, then a continuation byte:
    # skipping the ASCII part's check would join the lead and the continuation into a valid "é"
    parts = [TOKENS[0].encode() + b" x\xc3", b"abc\n", b"\xa9 y\n"]
    assembly = Assembly()
    for part in parts:
        assembly.feed(part)
    # When finished / Then it is not UTF-8 (never joined into a valid "é"), and redacted on its bytes
    assert assembly.finish() == (b"".join(parts).replace(TOKENS[0].encode(), REPLACEMENT.encode()), True)


class _RecordingFiles:
    """Answers readFiles from a dict and records when each batch was asked for."""

    def __init__(self, parts: dict[str, bytes], fail_on: int | None = None) -> None:
        self.parts, self.fail_on, self.events = parts, fail_on, []
        self.calls = 0

    def read(self, interpreter_id: str, session_id: str, paths: list[str]) -> dict[str, bytes]:
        self.calls += 1
        self.events.append(("read", paths[0]))
        if self.calls == self.fail_on:
            raise ToolFailed("readFiles_failed:missing:1")
        return {p: self.parts[p] for p in paths}


def _item(count: int) -> tuple[dict, dict[str, bytes]]:
    parts = {f".sandbox/parts/0.{i}": bytes([65 + i]) * CHUNK_BYTES for i in range(count)}
    return {"path": "outputs/a.bin", "parts": list(parts)}, parts


def test_read_artifact_asks_for_the_next_batch_while_the_caller_works() -> None:
    # Given an artifact of three batches of parts
    per_call = READ_BATCH_BYTES // CHUNK_BYTES
    item, parts = _item(3 * per_call)
    files = _RecordingFiles(parts)
    # When the caller takes its parts, and on each batch's first part waits (bounded) for the
    # next batch's read to start
    taken, overlapped = [], []
    for index, block in enumerate(_read_artifact(files, "ci", "s", item)):  # type: ignore[arg-type]
        taken.append(block)
        batch = index // per_call
        if index % per_call == 0 and batch < 2:
            deadline = time.monotonic() + 10
            while files.calls < batch + 2 and time.monotonic() < deadline:
                time.sleep(0.005)
            overlapped.append(files.calls >= batch + 2)
    # Then every part came in order, and batch k+1 was being read while the caller held batch k
    assert b"".join(taken) == b"".join(parts.values())
    assert files.calls == 3 and overlapped == [True, True]


def test_read_artifact_failure_of_a_later_batch_is_the_collection_failure() -> None:
    # Given an artifact whose second batch cannot be read
    item, parts = _item(2 * READ_BATCH_BYTES // CHUNK_BYTES)
    files = _RecordingFiles(parts, fail_on=2)
    # When read / Then the failure surfaces where that batch is due, after the first batch's parts
    got = []
    with pytest.raises(ToolFailed, match="readFiles_failed"):
        for block in _read_artifact(files, "ci", "s", item):  # type: ignore[arg-type]
            got.append(block)
    assert len(got) == READ_BATCH_BYTES // CHUNK_BYTES


def _chunk(kind: bytes, body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")


PNG_HEAD = PNG_SIGNATURE + _chunk(b"IHDR", (1).to_bytes(4, "big") * 2 + b"\x08\x00\x00\x00\x00")
PNG_IMAGE = _chunk(b"IDAT", zlib.compress(b"\x00\x00")) + _chunk(b"IEND", b"")


def test_redact_artifact_png_loses_text_chunks_and_what_follows_iend() -> None:
    # Given a PNG with a token in tEXt, zTXt and iTXt chunks, and the token again after IEND
    text = (
        _chunk(b"tEXt", b"Comment\x00" + TOKENS[0].encode())
        + _chunk(b"zTXt", b"Note\x00\x00" + zlib.compress(TOKENS[0].encode()))
        + _chunk(b"iTXt", b"Title\x00\x00\x00\x00\x00" + TOKENS[0].encode())
    )
    data = PNG_HEAD + text + PNG_IMAGE + TOKENS[0].encode()
    # When redacted / Then only the image chunks are stored, byte for byte
    assert redact_artifact(data) == (PNG_HEAD + PNG_IMAGE, True)


def test_redact_artifact_png_without_text_is_unchanged_and_a_broken_one_redacted_on_its_bytes() -> None:
    # Given a PNG without text chunks, and one cut inside a chunk that holds a token
    clean = PNG_HEAD + PNG_IMAGE
    broken = PNG_HEAD + _chunk(b"tEXt", b"Comment\x00" + TOKENS[0].encode())[:-6]
    # When redacted / Then the clean one is stored as it is, the broken one without the token
    assert redact_artifact(clean) == (clean, False)
    stored, changed = redact_artifact(broken)
    assert changed is True and TOKENS[0][:20].encode() not in stored


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_redact_artifact_utf16_without_a_byte_order_mark_is_redacted_like_with_one(
    codec: str, chunk: int | None
) -> None:
    # Given ASCII text in UTF-16 without a byte-order mark (every other byte NUL) holding a token
    text = "region,key\nacme," + TOKENS[0] + "\n"
    data = text.encode(codec)
    # When redacted (whole, or fed in parts)
    stored, changed = assemble(data, chunk)
    # Then it is redacted as it would be behind a mark: same encoding, the token replaced
    assert changed is True
    assert stored == redact(text).encode(codec)
    assert TOKENS[0] not in stored.decode(codec)


def test_redact_artifact_utf16_text_inside_binary_is_redacted_and_the_rest_kept() -> None:
    # Given binary bytes with a UTF-16-LE string holding a token in the middle
    head, tail = b"\x00\x01\x02binary", bytes(range(256))
    data = head + ("token=" + TOKENS[0]).encode("utf-16-le") + tail
    # When redacted / Then only the string changed
    assert redact_artifact(data) == (head + ("token=" + REPLACEMENT).encode("utf-16-le") + tail, True)


_IMAGE_CHUNKS = (b"PLTE", b"tRNS", b"gAMA", b"cHRM", b"sRGB", b"pHYs")


def test_redact_artifact_png_keeps_only_the_chunks_an_image_needs() -> None:
    # Given a PNG with the chunks an image may need, and an eXIf and private chunks holding a token
    needed = b"".join(_chunk(kind, b"\x00\x00\x00\x01") for kind in _IMAGE_CHUNKS)
    exif = _chunk(b"eXIf", b"MM\x00*" + TOKENS[0].encode())
    private = _chunk(b"prVt", TOKENS[0].encode()) + _chunk(b"tIME", b"\x07\xe8\x01\x01\x00\x00\x00")
    data = PNG_HEAD + exif + needed + private + PNG_IMAGE
    # When redacted / Then eXIf, the private and every other ancillary chunk are dropped, the rest kept
    assert redact_artifact(data) == (PNG_HEAD + needed + PNG_IMAGE, True)


def test_redact_artifact_png_icc_profile_kept_with_a_token_free_name() -> None:
    # Given a PNG whose iCCP chunk (kept: it is colour) names its profile with a token
    profile = zlib.compress(b"profile bytes")
    named = _chunk(b"iCCP", TOKENS[0].encode()[:79] + b"\x00\x00" + profile)
    plain = _chunk(b"iCCP", b"sRGB IEC61966-2.1\x00\x00" + profile)
    # When redacted / Then a plain name stays as it is, a token-shaped one is replaced (valid CRC)
    assert redact_artifact(PNG_HEAD + plain + PNG_IMAGE) == (PNG_HEAD + plain + PNG_IMAGE, False)
    stored, changed = redact_artifact(PNG_HEAD + named + PNG_IMAGE)
    assert changed is True and TOKENS[0][:20].encode() not in stored
    assert stored == PNG_HEAD + _chunk(b"iCCP", b"ICC profile\x00\x00" + profile) + PNG_IMAGE
