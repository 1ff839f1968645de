"""The worker's frames, shared with the server: requests and answers on two pipe fds, every length
checked against its bound before what follows is read (the package's docstring has the layout)."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from typing import Any

# Frames from the worker are read by the server under these bounds before anything is buffered:
# the JSON part holds scalars and short messages only, output travels as raw blocks of at most
# the kept bytes per stream (the server's limits), a file tool's blocks are streamed on.
MAX_JSON = 64 * 1024
# A request the server sends (trusted): writeFiles carries inline uploads.
MAX_REQUEST = 256 * 1024 * 1024
# readFiles: one file per answer up to this size (base64 + JSON stays one event-stream message
# the SDK's parser accepts); larger artifacts are read in parts (functions/dispatch/artifacts.py
# splits them in the session).
MAX_READ_BYTES = 32 * 1024 * 1024
MAX_BLOCK = MAX_READ_BYTES * 4 // 3 + 64 * 1024  # one readFiles block: base64 + its JSON wrapper
_HEADER = struct.Struct(">II")  # JSON length, raw length
_BLOCK = struct.Struct(">I")  # each raw block: its length, then its bytes
BLOCK_HEADER = _BLOCK.size
_MESSAGE_CHARS = 4096  # an error message in a frame's JSON part (which is bounded)


class ProtocolError(ValueError):
    """A frame that breaks the protocol or its bounds: the session behind it is not trusted again."""


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def send_frame(fd: int, obj: Any, blocks: list[bytes] | tuple[bytes, ...] = ()) -> None:
    """One frame: `obj` as JSON, then each of `blocks` (length-prefixed) as the raw part."""
    # ensure_ascii (the default): ~2x faster to encode and to decode than UTF-8 for non-ASCII text.
    payload = json.dumps(obj).encode("ascii")
    raw_length = sum(_BLOCK.size + len(b) for b in blocks)
    head = _HEADER.pack(len(payload), raw_length) + payload
    if raw_length <= 65536:  # small: one write
        write_all(fd, b"".join([head, *(_BLOCK.pack(len(b)) + b for b in blocks)]))
        return
    write_all(fd, head)
    for block in blocks:  # large (file contents): no copy of a block to frame it
        write_all(fd, _BLOCK.pack(len(block)))
        write_all(fd, block)


def _read_exact(fd: int, n: int) -> bytes | None:
    buffer = bytearray(n)
    view, done = memoryview(buffer), 0
    while done < n:
        got = os.readv(fd, [view[done:]])
        if not got:
            return None
        done += got
    return bytes(buffer)


def recv_frame(fd: int, max_json: int = MAX_REQUEST) -> Frame | None:
    """The next frame's JSON part (its raw part still unread: `Frame.blocks`), or None at EOF.

    Both lengths are checked before anything is read: a JSON part over `max_json` is a
    ProtocolError, raised with nothing buffered."""
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    length, raw_length = _HEADER.unpack(header)
    if length > max_json:
        raise ProtocolError(f"a frame's JSON part of {length} bytes exceeds {max_json}")
    payload = _read_exact(fd, length)
    if payload is None:
        return None
    try:
        obj = json.loads(payload.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # nested deeper than the parser goes is no frame either
        raise ProtocolError("a frame's JSON part does not parse") from exc
    if not isinstance(obj, dict):
        raise ProtocolError("a frame's JSON part is not an object")
    return Frame(fd, obj, raw_length)


class Frame:
    """A received frame: its JSON object, and its raw part to read block by block, bounded."""

    def __init__(self, fd: int, obj: dict[str, Any], raw_length: int) -> None:
        self.fd, self.obj, self.raw_length = fd, obj, raw_length
        self.remaining = raw_length

    def next_block(self, max_bytes: int) -> int | None:
        """The next block's length (its bytes are read with `read`), None when the raw part is
        done. A block over `max_bytes`, or past the announced raw length, is a ProtocolError."""
        if self.remaining == 0:
            return None
        if self.remaining < _BLOCK.size:
            raise ProtocolError("a raw part ends inside a block's length")
        head = _read_exact(self.fd, _BLOCK.size)
        if head is None:
            raise ProtocolError("the channel closed inside a frame")
        self.remaining -= _BLOCK.size
        length: int = _BLOCK.unpack(head)[0]
        if length > max_bytes or length > self.remaining:
            raise ProtocolError(f"a raw block of {length} bytes exceeds its bound ({max_bytes})")
        return length

    def read(self, n: int) -> bytes:
        data = _read_exact(self.fd, n) if n else b""
        if data is None:
            raise ProtocolError("the channel closed inside a frame")
        self.remaining -= n
        return data

    def read_pieces(self, n: int, piece: int = 1 << 20) -> Iterator[bytes]:
        """`n` bytes of the current block, in pieces of at most `piece` bytes (never all at once)."""
        while n:
            chunk = self.read(min(n, piece))
            n -= len(chunk)
            yield chunk

    def discard(self, max_block: int) -> None:
        """Read past whatever is left of the raw part (blocks still within `max_block`)."""
        while self.remaining:
            length = self.next_block(max_block)
            if length is None:
                return
            for _ in self.read_pieces(length):
                pass

    def blocks(self, limits: list[int]) -> list[bytes]:
        """Exactly the raw part's blocks, at most one per entry of `limits`, each within it."""
        found = []
        for limit in limits:
            length = self.next_block(limit)
            if length is None:
                break
            found.append(self.read(length))
        if self.remaining:
            raise ProtocolError("a frame carries more raw blocks than its answer has")
        return found


def bounded_message(text: str) -> str:
    """`text` cut to what an error message in a frame's JSON part may hold."""
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."
