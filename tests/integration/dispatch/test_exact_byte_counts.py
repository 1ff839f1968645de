"""`stdout_bytes` / `stderr_bytes` are exactly what the code's output that left the
session was, also beyond what the local interpreter keeps (the caps plus a margin), with nothing
of ours counted (the readiness preamble); a trailing expression's repr is output like any
other."""

from __future__ import annotations

from .conftest import Stack, event

CASES = [  # (code, stdout bytes, stderr bytes)
    # its return value is shown like a notebook cell's ("200000\n") and counted
    ("import sys\nsys.stdout.write('é' * 200000)", 400_007, 0),
    ("print('x' * 3_000_000)", 3_000_001, 0),  # three times the local capture
    ("import sys\nsys.stderr.write('w' * 50_000)\nprint('ok')", 3, 50_000),
]


def test_dispatch_byte_counts_are_exact(stack: Stack) -> None:
    # Given a turn
    assert stack.dispatch(event("begin_turn"))["ok"] is True
    # When calls write to stdout / stderr
    results = [
        stack.dispatch(event(call_id=f"c-bytes-{i}", code=code)) for i, (code, _, _) in enumerate(CASES)
    ]
    stack.dispatch(event("end_turn"))
    # Then every count is exact, and truncation says whether the agent saw all of it
    assert [r["ok"] for r in results] == [True] * len(CASES), results
    assert [(r["stdout_bytes"], r["stderr_bytes"]) for r in results] == [(o, e) for _, o, e in CASES]
    assert [r["stdout_truncated"] for r in results] == [o > 262_144 for _, o, _ in CASES]
    assert [r["stderr_truncated"] for r in results] == [e > 32_768 for _, _, e in CASES]
