"""The local interpreter's worker<->server frames: JSON, then length-prefixed raw blocks (output,
a file tool's content blocks) each exactly as the worker wrote them. Every length is checked
against its bound before anything is read, so a frame the session forges is refused unbuffered."""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator

import pytest

from infra.local.interpreter.worker import frames as worker


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        os.close(fd)


def _send_in_thread(write_fd: int, obj: dict, blocks: list[bytes]) -> threading.Thread:
    sender = threading.Thread(target=worker.send_frame, args=(write_fd, obj, blocks))
    sender.start()  # a thread: a frame may be larger than the pipe's buffer
    return sender


def test_frame_raw_blocks_round_trip_exactly(pipe: tuple[int, int]) -> None:
    # Given a result with two blocks, one of 3 MiB (more than a pipe holds)
    blocks = [b'{"type": "text", "text": "a"}', b"x" * (3 * 1024 * 1024)]
    sender = _send_in_thread(pipe[1], {"exit_code": 0}, blocks)
    # When received, the large block in pieces
    frame = worker.recv_frame(pipe[0], max_json=worker.MAX_JSON)
    assert frame is not None
    first = frame.read(frame.next_block(64) or 0)
    length = frame.next_block(4 << 20)
    pieces = list(frame.read_pieces(length or 0, piece=1 << 20))
    sender.join()
    # Then the JSON and the blocks are the same bytes, split where they were, nothing left over
    assert frame.obj == {"exit_code": 0}
    assert [first, b"".join(pieces)] == blocks
    assert len(pieces) == 3 and frame.next_block(1) is None


def test_frame_without_raw_part_is_plain_json(pipe: tuple[int, int]) -> None:
    worker.send_frame(pipe[1], {"op": "readFiles", "arguments": {"paths": ["é.txt"]}})
    frame = worker.recv_frame(pipe[0])
    assert frame is not None and frame.raw_length == 0
    assert frame.obj == {"op": "readFiles", "arguments": {"paths": ["é.txt"]}}


def test_frame_json_part_over_its_bound_is_refused_before_it_is_read(pipe: tuple[int, int]) -> None:
    # Given a header announcing a 60 MiB JSON part (and nothing behind it)
    os.write(pipe[1], struct.pack(">II", 60 << 20, 0))
    # When received / Then refused at once: no 60 MiB read was even attempted (it would block here)
    with pytest.raises(worker.ProtocolError, match="JSON part"):
        worker.recv_frame(pipe[0], max_json=worker.MAX_JSON)


@pytest.mark.parametrize(
    ("raw", "announced", "match"),
    [
        (struct.pack(">I", 1 << 30), 1 << 30, "exceeds its bound"),  # a block over the bound
        (struct.pack(">I", 10) + b"abc", 7, "exceeds its bound"),  # a block past the raw part
        (b"\x00\x00", 2, "inside a block's length"),
    ],
)
def test_frame_block_lengths_outside_their_bounds_are_refused(
    pipe: tuple[int, int], raw: bytes, announced: int, match: str
) -> None:
    payload = b"{}"
    os.write(pipe[1], struct.pack(">II", len(payload), announced) + payload + raw)
    frame = worker.recv_frame(pipe[0], max_json=worker.MAX_JSON)
    assert frame is not None
    with pytest.raises(worker.ProtocolError, match=match):
        frame.blocks([1 << 20, 1 << 20])


def test_frame_with_more_blocks_than_the_answer_has_is_refused(pipe: tuple[int, int]) -> None:
    worker.send_frame(pipe[1], {"exit_code": 0}, [b"out", b"err", b"forged"])
    frame = worker.recv_frame(pipe[0], max_json=worker.MAX_JSON)
    assert frame is not None
    with pytest.raises(worker.ProtocolError, match="more raw blocks"):
        frame.blocks([100, 100])
