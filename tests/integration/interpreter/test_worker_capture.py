"""The local interpreter worker's output capture (`capture.Capture`): at a call's end every byte
written to fd 1 / fd 2 during the call is kept, however late the machine schedules the thread
that reads the pipe, and a background child still holding the pipe does not hold the call."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator

import pytest

from infra.local.interpreter.worker import capture

LIMIT = 1 << 20


@pytest.fixture
def late_readers(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Pipe readers that start reading only when the test releases them (a loaded machine that
    has not scheduled them yet)."""
    release = threading.Event()
    run = capture._Drain.run

    def late(self: capture._Drain) -> None:
        release.wait(30)
        run(self)

    monkeypatch.setattr(capture._Drain, "run", late)
    yield release
    release.set()


def test_worker_capture_keeps_every_byte_when_its_reader_runs_late(late_readers: threading.Event) -> None:
    # Given a call that wrote to both streams, whose pipe readers are scheduled only a second
    # after the call ended (what fits in the pipes: nothing reads them before)
    payload = b"line\n" * 10_000
    with capture.Capture(LIMIT, LIMIT) as cap:
        os.write(1, payload)
        os.write(2, b"err\n")
        threading.Timer(1.0, late_readers.set).start()
    # When the call's end has returned
    # Then both streams kept everything, and counted it
    assert cap.blocks == [payload, b"err\n"]
    assert (cap.stdout_bytes, cap.stderr_bytes) == (len(payload), 4)


def test_worker_capture_ends_while_a_background_child_holds_the_pipe() -> None:
    # Given a call whose background child keeps the output pipe open, and writes on without pause
    with capture.Capture(LIMIT, LIMIT) as cap:
        os.write(1, b"before\n")
        quiet = subprocess.Popen(["sleep", "300"], stdout=1)
        noisy = subprocess.Popen(["yes"], stdout=2)
    try:
        # When the call ends / Then it ended with both children still running, the call's own
        # output kept
        assert quiet.poll() is None and noisy.poll() is None
        assert cap.blocks[0] == b"before\n"
    finally:
        for child in (quiet, noisy):
            child.kill()
            child.wait()
