"""An artifact's bytes as they are stored: redacted host-side (docs/redaction.md), whatever their
encoding. Text (UTF-8) goes through the catalogue line by line as it arrives (`Assembly`); anything
else through `redact_other`: a PNG keeps only the chunks an image needs, text behind a byte-order
mark is decoded and redacted, ASCII-compatible text is redacted on its bytes, and binary data has
its UTF-16 runs (text without a byte-order mark) redacted."""

from __future__ import annotations

import codecs
import hashlib
import zlib
from typing import Any

from sandbox_common.redaction import catalogue


class Assembly:
    """One artifact's bytes, taken part by part as they arrive (docs/files.md): their sha256, whether
    they are UTF-8 text, and the text's host-side redaction (docs/redaction.md) of every complete line,
    so all of it runs while the next part is still on its way out of the session.

    The redaction equals `catalogue.redact` of the whole decoded text: no catalogue token
    contains a newline, so whole lines redact independently, and only the lines
    `catalogue.token_lines` names (those holding a token's anchor) are decoded and redacted.
    Anything that is not UTF-8 goes through `redact_other` once all of it is there."""

    def __init__(self) -> None:
        self.size = 0
        self._raw: list[bytes] = []
        self._sha = hashlib.sha256()
        self._decoder: Any = codecs.getincrementaldecoder("utf-8")("strict")
        self._text = True
        self._pending: list[bytes] = []  # the current line's bytes so far (no newline in them)
        self._clean: list[bytes | memoryview] = []
        self._changed = False

    def feed(self, block: bytes) -> None:
        self.size += len(block)
        self._raw.append(block)
        self._sha.update(block)
        if not self._text:
            return
        if not block.isascii() or self._pending_non_ascii():
            try:
                self._decoder.decode(block)
            except UnicodeDecodeError:
                self._text = False
                return
        newline = block.rfind(b"\n")
        if newline < 0:
            self._pending.append(block)
            return
        head = block if newline == len(block) - 1 else block[: newline + 1]
        lines = b"".join([*self._pending, head]) if self._pending else head
        self._pending = [block[newline + 1 :]] if newline < len(block) - 1 else []
        self._redact_lines(lines)

    def _pending_non_ascii(self) -> bool:
        # the decoder holds the start of a multi-byte character cut at the previous block's end
        return bool(self._decoder.getstate()[0])

    def _redact_lines(self, data: bytes) -> None:
        done, view = 0, memoryview(data)  # views: the pieces are copied once, by the final join
        for start, end in catalogue.token_lines(data):
            text = data[start:end].decode("utf-8")
            cleaned = catalogue.redact(text)
            if cleaned != text:
                self._clean.extend((view[done:start], cleaned.encode("utf-8")))
                self._changed, done = True, end
        self._clean.append(view[done:] if done else data)

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()

    def finish(self) -> tuple[bytes, bool]:
        """(bytes to store, whether redaction changed anything)."""
        raw = self._raw[0] if len(self._raw) == 1 else b"".join(self._raw)
        if self._text:
            try:
                self._decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                self._text = False
        if self._text and self._pending:  # the last line, without a newline
            self._redact_lines(b"".join(self._pending))
            self._pending = []
        if not self._text:
            return redact_other(raw)
        stored, changed = (b"".join(self._clean), True) if self._changed else (raw, False)
        if b"\x00" in stored:  # NUL is UTF-8 too: ASCII text in UTF-16 without a byte-order mark
            runs_redacted = redact_utf16_runs(stored)
            return runs_redacted, changed or runs_redacted != stored
        return stored, changed


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The PNG chunks an image needs (its header, palette, data and end, transparency and colour),
# kept; every other chunk — text (`savefig(metadata=...)` writes tEXt), eXIf, time, private and
# unknown ones — may carry anything and is dropped.
PNG_IMAGE_CHUNKS = frozenset(
    {b"IHDR", b"PLTE", b"IDAT", b"IEND", b"tRNS", b"gAMA", b"cHRM", b"sRGB", b"iCCP", b"pHYs"}
)
# What a token-shaped iCCP profile name becomes (its profile, compressed colour data, is kept).
ICC_PROFILE_NAME = b"ICC profile"
# UTF-16 text without a byte-order mark, as it sits in a file: runs of at least this many code
# units of printable Latin-1 (ASCII text with every other byte NUL), in either byte order and at
# either byte offset. A token is longer than this, and whatever prefix its class needs
# (`Authorization: Bearer `) is in its run.
_UTF16_MIN_RUN = 16
_UTF16_TEXT_BYTE = bytes(int(b in (9, 10, 13) or 0x20 <= b <= 0x7E or b >= 0xA0) for b in range(256))
_UTF16_NUL_BYTE = bytes(int(b == 0) for b in range(256))
_UTF16_BYTE_CLASS = bytes(
    ord("Z") if b == 0 else ord("T") if _UTF16_TEXT_BYTE[b] else ord("O") for b in range(256)
)
_UTF16_RUN_CLASSES = b"TZ" * (_UTF16_MIN_RUN - 1) + b"T"
# Byte-order marks, longest first (UTF-32-LE's starts with UTF-16-LE's).
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def redact_utf16_runs(data: bytes) -> bytes:
    """`data` with every UTF-16 run (no byte-order mark needed: either byte order, at any offset)
    decoded, redacted and encoded back in place; the bytes around the runs are kept as they are.
    The runs are found at C speed (each half of the code units mapped to 0/1 and the two masks
    ANDed as integers), so a large binary file costs a few passes over its bytes."""
    if not _has_utf16_run(data):  # the common case (binary): one look, nothing decoded
        return data
    for offset in (0, 1):
        for codec in ("utf-16-le", "utf-16-be"):
            data = _redact_runs(data, offset, codec)
    return data


def _has_utf16_run(data: bytes) -> bool:
    """Whether a UTF-16 run of _UTF16_MIN_RUN units is in `data`, either order, either offset:
    with every byte mapped to its class (T text, Z NUL, O other), such a run reads TZTZ… (little
    endian) or ZTZT… (big endian), and both hold TZ…T; one translate and one find."""
    return _UTF16_RUN_CLASSES in data.translate(_UTF16_BYTE_CLASS)


def _redact_runs(data: bytes, offset: int, codec: str) -> bytes:
    first, second = data[offset::2], data[offset + 1 :: 2]
    units = min(len(first), len(second))
    text_half, nul_half = (first, second) if codec == "utf-16-le" else (second, first)
    mask = (
        int.from_bytes(text_half[:units].translate(_UTF16_TEXT_BYTE), "big")
        & int.from_bytes(nul_half[:units].translate(_UTF16_NUL_BYTE), "big")
    ).to_bytes(units, "big")
    needle = b"\x01" * _UTF16_MIN_RUN
    pieces: list[bytes] = []
    done = at = 0
    while (start := mask.find(needle, at)) >= 0:
        end = mask.find(b"\x00", start)
        end = units if end < 0 else end
        at = end
        lo, hi = offset + 2 * start, offset + 2 * end
        text = data[lo:hi].decode(codec)
        cleaned = catalogue.redact(text)
        if cleaned != text:
            pieces += (data[done:lo], cleaned.encode(codec))
            done = hi
    return b"".join([*pieces, data[done:]]) if pieces else data


def redact_other(data: bytes) -> tuple[bytes, bool]:
    """An artifact that is not UTF-8: a PNG keeps only the chunks an image needs (a PNG whose
    chunks do not parse is redacted on its bytes); text behind a UTF-16/UTF-32 byte-order mark
    is decoded, redacted and encoded back; anything else without a NUL byte is ASCII-compatible
    text (latin-1, cp1252, UTF-8 with invalid bytes) and is redacted on its bytes, every byte
    that is not part of a token kept as it is. What is left (NUL bytes, no byte-order mark) is
    binary: its UTF-16 runs (text without a byte-order mark) are redacted, every other byte is
    stored as it is."""
    if data.startswith(PNG_SIGNATURE):
        stripped = strip_png_text(data)
        if stripped is None:  # not an image any decoder reads whole: no chunk of it is trusted
            on_bytes = redact_utf16_runs(catalogue.redact_bytes(data))
            return on_bytes, on_bytes != data
        return stripped, stripped != data
    for bom, codec in _BOMS:
        if data.startswith(bom):
            width = 4 if "32" in codec else 2
            body = data[len(bom) :]
            whole = len(body) - len(body) % width
            try:
                text = body[:whole].decode(codec, "surrogatepass")
            except UnicodeDecodeError:
                continue  # not UTF-32 after all (a UTF-16-LE text starting with U+0000)
            cleaned = catalogue.redact(text)
            if cleaned == text:
                return data, False
            return bom + cleaned.encode(codec, "surrogatepass") + body[whole:], True
    if b"\x00" in data:
        cleaned_runs = redact_utf16_runs(data)
        return cleaned_runs, cleaned_runs != data
    cleaned_bytes = catalogue.redact_bytes(data)
    return cleaned_bytes, cleaned_bytes != data


def strip_png_text(data: bytes) -> bytes | None:
    """`data` (a PNG) with only the chunks an image needs (PNG_IMAGE_CHUNKS; an iCCP profile
    whose name holds a token shape is renamed) and nothing after IEND; None when the chunk
    structure does not parse."""
    kept, at, size = [data[:8]], 8, len(data)
    while at + 12 <= size:
        length = int.from_bytes(data[at : at + 4], "big")
        kind = data[at + 4 : at + 8]
        end = at + 12 + length
        if end > size:
            return None
        if kind == b"iCCP":
            kept.append(_clean_iccp(data[at:end]))
        elif kind in PNG_IMAGE_CHUNKS:
            kept.append(data[at:end])
        at = end
        if kind == b"IEND":
            return b"".join(kept)
    return None


def _clean_iccp(chunk: bytes) -> bytes:
    """An iCCP chunk (length, type, body, CRC) whose profile name — a Latin-1 keyword before the
    body's first NUL — is ICC_PROFILE_NAME instead when it holds a token shape."""
    body = chunk[8:-4]
    name, nul, rest = body.partition(b"\x00")
    if not nul or catalogue.redact(name.decode("latin-1")) == name.decode("latin-1"):
        return chunk
    body = ICC_PROFILE_NAME + b"\x00" + rest
    return len(body).to_bytes(4, "big") + b"iCCP" + body + zlib.crc32(b"iCCP" + body).to_bytes(4, "big")


def redact_artifact(data: bytes) -> tuple[bytes, bool]:
    """Text (UTF-8 decodable) through the host-side catalogue redactor, anything
    else through `redact_other`. Returns (bytes to store, whether redaction changed anything); equal to
    `catalogue.redact(data.decode())` for text, computed chunk by chunk on the bytes."""
    assembly = Assembly()
    assembly.feed(data)
    return assembly.finish()
