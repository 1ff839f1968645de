"""The last lows of the red-team pass, through dispatch on the shared real-parts stack (moto, the
local interpreter under bubblewrap, the quota Lambda in the emulator): each reproduced as it was
found, then what holds now."""

from __future__ import annotations

from .conftest import Stack, event

# The session's code writes a frame of its own to the worker's answer channel: 60,000 nested
# brackets, which no JSON parser takes (RecursionError).
_NESTED_FRAME = (
    "import os, struct, sys\n"
    "fd = int(sys.argv[sys.argv.index('--resp-fd') + 1])\n"
    "payload = b'[' * 60000\n"
    "os.write(fd, struct.pack('>II', len(payload), 0) + payload)\n"
    "print('stored')\n"
)


def test_hardening_unparseable_frame_ends_the_session_and_no_later_call_answers_an_earlier_result(
    stack: Stack,
) -> None:
    # Given a turn with a live session
    first = stack.dispatch(event(call_id="f1", code="print('first')"))
    assert first["stdout"] == "first\n"
    # When its code writes a frame the interpreter cannot parse
    attack = stack.dispatch(event(call_id="f2", code=_NESTED_FRAME))
    # Then that call fails as a protocol error, and the session is ended
    assert (attack["ok"], attack["error"]) == (False, "SandboxError"), attack
    assert "protocol" in attack["stderr"]
    assert first["session_id"] not in stack.live_sessions()
    # And each later call of the turn answers its own output, in a fresh session
    for n_call in range(3, 6):
        later = stack.dispatch(event(call_id=f"f{n_call}", code=f"print('call {n_call}')"))
        assert (later["ok"], later["stdout"]) == (True, f"call {n_call}\n"), later
        assert later["session_id"] != first["session_id"]
