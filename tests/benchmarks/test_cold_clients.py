"""Benchmark `cold_clients`: the CPU a cold container spends building its AWS clients, through
`sandbox_common.aws.new_client` (one session per process, and one botocore data loader) against a
new plain `boto3.session.Session` per client (each registering botocore's handlers and parsing
its data files again), measured in the same run. The clients are a cold dispatch container's:
DynamoDB, Lambda (the quota call), S3 (artifacts), STS (the tenant's role), AgentCore (the session)
and SSM. Target: ratio ≤ 0.7.

Every sample is a fresh interpreter, timed inside around the client building only (CPU time, so
a busy neighbour moves it less); the two ways are interleaved round-robin.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks._report import emit

pytestmark = pytest.mark.bench

LAYER_ROOT = Path(__file__).resolve().parents[2] / "layers" / "common" / "python"
TARGET_RATIO = 0.7
SERVICES = ("dynamodb", "lambda", "s3", "sts", "bedrock-agentcore", "ssm")
_BUILD = {
    "shared": "from sandbox_common import aws\nbuild = lambda s: aws.new_client(s, region_name='us-east-1')",
    "per_client": "import boto3\nbuild = lambda s: boto3.session.Session(region_name='us-east-1').client(s)",
}
_TIMED = (
    "import sys, time\nexec(sys.argv[1])\nimport boto3, botocore.session\nt = time.process_time()\n"
    "for service in sys.argv[2:]:\n    build(service)\n"
    "sys.stdout.write(repr(time.process_time() - t))"
)


def _sample(way: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _TIMED, _BUILD[way], *SERVICES],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(LAYER_ROOT), "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
        check=True,
    )
    return float(out.stdout)


def test_cold_clients_share_one_session_and_data_loader(bench_full: bool) -> None:
    # Given a fresh interpreter per sample, the two ways interleaved
    rounds = 9 if bench_full else 1
    samples: dict[str, list[float]] = {"shared": [], "per_client": []}
    for _ in range(rounds):
        for way in samples:
            samples[way].append(_sample(way))
    # When the medians are compared
    shared, per_client = (statistics.median(samples[w]) for w in ("shared", "per_client"))
    ratio = shared / per_client
    emit(
        "cold_clients",
        target=f"{len(SERVICES)} clients of a cold container: one session <= {TARGET_RATIO} x a session each",
        ratio=ratio,
        shared_ms=round(shared * 1000, 1),
        session_per_client_ms=round(per_client * 1000, 1),
        services=list(SERVICES),
        rounds=rounds,
    )
    # Then one session and its loader cost less than a session per client (the target itself at full size)
    assert shared < per_client, samples
    if bench_full:
        assert ratio <= TARGET_RATIO, samples
