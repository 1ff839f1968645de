"""Benchmark `artifact_throughput`: one 20 MiB artifact (smoke: 2 MiB)
through the whole artifact path — collect from a local-interpreter session (helper snippet,
readFiles in parts, sha256 check), host-side redaction, store in the artifacts bucket (object
+ file_id pointer) — against a bare S3 put of the same bytes to the same moto server, in the
same run. Target: throughput ratio ≥ 0.5 for the text artifact (the one redaction must read);
a binary artifact of the same size (stored byte-exact, never redacted) is measured beside it.

The interpreter and moto run in their own processes, as `sandboxctl local up` runs them (in this
process their HTTP work would compete with the path for the GIL). Printed beside the ratio: the
path's floor on this emulation, the bare `readFiles` transfer of the same parts (no helper, no
checks, no redaction) plus the bare put, one after the other (`ratio_to_floor`: floor ÷ path;
above 1 where the path overlaps the two).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from sandbox_runtime.artifacts import (
    CHUNK_BYTES,
    READ_BATCH_BYTES,
    ArtifactContext,
    ArtifactStore,
    collect_and_store,
    redact_artifact,
)
from sandbox_runtime.runner.tools import SessionFiles

from tests.benchmarks._moto import moto_in_own_process
from tests.benchmarks._report import emit
from tests.benchmarks.test_host_redaction import realistic_stdout
from tests.integration.files.conftest import ACME_CI, BUCKET, SESSION_PYTHON, LocalCredentials
from tests.integration.interpreter._helpers import invoke, make_client

pytestmark = pytest.mark.bench
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    """This module's moto: the local stack's serial moto server, in its own process."""
    with moto_in_own_process() as endpoint:
        yield endpoint


@pytest.fixture
def interpreter_endpoint() -> Iterator[str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "infra.local.interpreter",
            f"--interpreter={ACME_CI}=PUBLIC",
            f"--python={SESSION_PYTHON}",
        ],
        cwd=str(REPO),
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert proc.stdout is not None
        yield json.loads(proc.stdout.readline())["endpoint"]
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def measure(endpoint: str, data: bytes, repeat: int, name: str) -> tuple[float, float, float, list]:
    """Best-of-N seconds of (the artifact path, a bare put, a bare readFiles of the path's parts),
    interleaved; and the results."""
    s3 = boto3.client("s3", region_name="us-east-1")
    tools = SessionFiles(
        tenant_id="acme", allowed_interpreter_ids=frozenset({ACME_CI}), credentials=LocalCredentials(endpoint)
    )
    client = make_client(endpoint)
    session = client.start_code_interpreter_session(codeInterpreterIdentifier=ACME_CI)["sessionId"]
    tools.write(ACME_CI, session, [("seed", data)])
    results, path_s, bare_s, read_s = [], float("inf"), float("inf"), float("inf")
    parts = (
        [f".sandbox/parts/0.{i}" for i in range(-(-len(data) // CHUNK_BYTES))]
        if len(data) > CHUNK_BYTES
        else []
    )
    per_call = READ_BATCH_BYTES // CHUNK_BYTES
    for run in range(repeat):  # the in-session write of fresh output is not timed
        invoke(
            client,
            ACME_CI,
            session,
            "import os, shutil, time\nos.makedirs('outputs', exist_ok=True)\n"
            f"shutil.copy('seed', 'outputs/{name}')\nos.utime('outputs/{name}', ns=(1, time.time_ns()))\n",
        )
        ctx = ArtifactContext(
            tenant_id="acme", turn_id="turn-b", invocation_id=f"inv-{name}-{run}", bucket=BUCKET
        )
        started = time.perf_counter()
        results.append(collect_and_store(tools, ACME_CI, session, ctx, ArtifactStore(s3)))
        path_s = min(path_s, time.perf_counter() - started)
        started = time.perf_counter()
        s3.put_object(Bucket=BUCKET, Key=f"bare/{name}", Body=data)
        bare_s = min(bare_s, time.perf_counter() - started)
        started = time.perf_counter()  # the parts the helper left, read as the path reads them
        got = [tools.read(ACME_CI, session, parts[i : i + per_call]) for i in range(0, len(parts), per_call)]
        read_s = min(read_s, time.perf_counter() - started)
        assert sum(len(b) for batch in got for b in batch.values()) == (len(data) if parts else 0)
    client.stop_code_interpreter_session(codeInterpreterIdentifier=ACME_CI, sessionId=session)
    return path_s, bare_s, read_s, results


def test_artifact_throughput(bench_full, interpreter_endpoint, moto_endpoint) -> None:
    # Given a text artifact (realistic output, a few tokens) and a binary one of the same size
    size = 20 * 1024 * 1024 if bench_full else 2 * 1024 * 1024
    repeat = 3 if bench_full else 1
    text = realistic_stdout(size).encode()
    binary = os.urandom(len(text))
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)

    # When each goes through the artifact path and through a bare put, interleaved, best of N
    text_path, text_bare, text_read, text_results = measure(interpreter_endpoint, text, repeat, "report.txt")
    bin_path, bin_bare, bin_read, bin_results = measure(interpreter_endpoint, binary, repeat, "table.parquet")
    ratio = text_bare / text_path

    # Then every run stored its artifact (text redacted, binary byte-exact), and the timing is reported
    assert len(text_results) == len(bin_results) == repeat
    redacted_size = len(redact_artifact(text)[0])
    assert [[a["bytes"] for a in r.artifacts] for r in text_results] == [[redacted_size]] * repeat
    assert [[a["bytes"] for a in r.artifacts] for r in bin_results] == [[len(binary)]] * repeat
    mib = len(text) / 2**20
    emit(
        "artifact_throughput",
        target="ratio >= 0.5",
        ratio=ratio,
        bytes=len(text),
        artifact_path_mib_s=round(mib / text_path, 1),
        bare_put_mib_s=round(mib / text_bare, 1),
        ratio_binary=round(bin_bare / bin_path, 4),
        binary_path_mib_s=round(mib / bin_path, 1),
        binary_bare_put_mib_s=round(mib / bin_bare, 1),
        bare_readfiles_mib_s=round(mib / text_read, 1),
        ratio_to_floor=round((text_read + text_bare) / text_path, 4),
        ratio_to_floor_binary=round((bin_read + bin_bare) / bin_path, 4),
    )
    if bench_full:
        assert ratio >= 0.5
