"""stdio_redactor: the in-sandbox redactor's cost, in real subprocesses, with and without it.

Timed inside the child (write loop + final flush), stdout a pipe drained by the parent — as in
the interpreter. Workloads: many short prints; a large output in 64 KiB chunks. Both are
token-free, so the redacted output must equal the plain output byte for byte."""

from __future__ import annotations

import subprocess
import sys

from sandbox_common.redaction.stdio import READINESS_MARKER, preamble_source

from ._report import emit

PRINTS = """
import sys, time
n = {n}
start = time.perf_counter()
for i in range(n):
    print("row", i, "value=ok")
sys.stdout.flush()
sys.stderr.write("T=%r\\n" % (time.perf_counter() - start))
"""

CHUNKS = """
import sys, time, random
rng = random.Random(1)
words = ("the quick brown fox jumps over lazy dog request_id=3f2a9c1e-5b7d status=200 "
         "path=/api/v1/items version=1.2.3 host=api.example.com 3.14159 42").split()
text = ""
while len(text) < 65536:
    text += " ".join(rng.choice(words) for _ in range(12)) + "\\n"
chunk = text[:65536]
n = {n}
write = sys.stdout.write
start = time.perf_counter()
for _ in range(n):
    write(chunk)
sys.stdout.flush()
sys.stderr.write("T=%r\\n" % (time.perf_counter() - start))
"""


def _child(script: str) -> tuple[float, bytes]:
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script], capture_output=True, timeout=600, check=True
    )
    return float(proc.stderr.decode().rsplit("T=", 1)[1]), proc.stdout


def _best(plain: str, redacted: str, repeat: int) -> tuple[float, float]:
    """Best of `repeat` runs each, interleaved (the machine is shared and noisy); also checks
    that the redactor passed the token-free output through byte for byte."""
    base = measured = float("inf")
    for _ in range(repeat):
        seconds, plain_out = _child(plain)
        base = min(base, seconds)
        seconds, redacted_out = _child(redacted)
        measured = min(measured, seconds)
        readiness, _, body = redacted_out.partition(b"\n")
        assert readiness.startswith(READINESS_MARKER.encode())
        assert body == plain_out
    return base, measured


def test_stdio_redactor_short_prints(bench_full):
    # Given 200 000 short prints (1/50 in smoke mode)
    n = 200_000 if bench_full else 4_000
    plain = PRINTS.format(n=n)
    redacted = preamble_source() + PRINTS.format(n=n)
    # When
    base, measured = _best(plain, redacted, 5 if bench_full else 2)
    ratio = measured / base
    # Then
    emit(
        "stdio_redactor_short_prints",
        target="ratio <= 1.5 (redacted time / plain time)",
        ratio=ratio,
        prints=n,
        plain_ms=round(base * 1e3, 2),
        redacted_ms=round(measured * 1e3, 2),
    )
    if bench_full:
        assert ratio <= 1.5


def test_stdio_redactor_large_chunks(bench_full):
    # Given 64 MiB written in 64 KiB chunks (1/50 in smoke mode)
    n = 1024 if bench_full else 20
    plain = CHUNKS.format(n=n)
    redacted = preamble_source() + CHUNKS.format(n=n)
    # When
    base, measured = _best(plain, redacted, 5 if bench_full else 2)
    ratio = base / measured  # redacted throughput relative to plain throughput
    # Then
    emit(
        "stdio_redactor_large_chunks",
        target="ratio >= 0.4 (redacted throughput / plain throughput)",
        ratio=ratio,
        mib=n / 16,
        plain_ms=round(base * 1e3, 2),
        redacted_ms=round(measured * 1e3, 2),
    )
    if bench_full:
        assert ratio >= 0.4
