"""The local interpreter's worker<->server frames: a file tool's content blocks travel as the raw
part, each block's bytes exactly as the worker encoded them; a frame whose sizes do not add up
is a protocol violation."""

from __future__ import annotations

import os
import struct
import threading

import pytest

from infra.local.interpreter import worker


def round_trip(obj: dict) -> dict:
    read_fd, write_fd = os.pipe()
    try:
        sender = threading.Thread(target=worker.send_frame, args=(write_fd, obj))
        sender.start()  # a thread: a frame may be larger than the pipe's buffer
        received = worker.recv_frame(read_fd)
        sender.join()
        return received
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_frame_raw_blocks_round_trip_exactly() -> None:
    # Given a result with two encoded blocks, one of 3 MiB (more than a pipe holds)
    blocks = [b'{"type": "text", "text": "a"}', b"x" * (3 * 1024 * 1024)]
    # When sent and received
    got = round_trip({"exit_code": 0, worker.RAW_KEY: blocks})
    # Then the blocks are the same bytes, split where they were, and the sizes are not left over
    assert got[worker.RAW_KEY] == blocks
    assert got["exit_code"] == 0 and worker.RAW_SIZES_KEY not in got


def test_frame_without_raw_part_is_plain_json() -> None:
    assert round_trip({"op": "readFiles", "arguments": {"paths": ["é.txt"]}}) == {
        "op": "readFiles",
        "arguments": {"paths": ["é.txt"]},
    }


def test_frame_with_sizes_not_matching_the_raw_part_is_refused() -> None:
    # Given a frame announcing 5 raw bytes whose JSON says the blocks are 2 + 2
    payload = b'{"raw_sizes": [2, 2]}'
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, struct.pack(">II", len(payload), 5) + payload + b"abcde")
        # When received / Then it is a protocol violation, not a guess
        with pytest.raises(ValueError, match="sizes"):
            worker.recv_frame(read_fd)
    finally:
        os.close(read_fd)
        os.close(write_fd)
