"""The local stack's moto, as `sandboxctl local up` runs it: the serial moto server in its own
process (benchmarks that time AWS calls: in the test process it would compete for the GIL with
the code being measured)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def moto_in_own_process() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "infra.local.moto_serial"],
        cwd=str(REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield json.loads(proc.stdout.readline())["endpoint"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
            proc.wait(timeout=10)
