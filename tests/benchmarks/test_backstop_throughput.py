"""backstop_throughput: decode + scan + build findings of a ~1 MiB subscription batch against a
bare base64+gzip+JSON decode of the same batch (no DynamoDB in the timed part)."""

from __future__ import annotations

import base64
import gzip
import json
import random

from backstop.scanner import decode, scan_events
from sandbox_common.redaction import TOKEN_CLASSES

from ._report import best_seconds, emit

LINES = (
    "INFO START RequestId: {rid} Version: $LATEST",
    (
        '{{"level":"INFO","message":"execute_code'
        ' finished","tenant_id":"acme","session_id":"s-{n}","duration_ms":{n},"exit_status":"ok"}}'
    ),
    "stdout chunk {n}: result = [1.5, 2.25, 3.125] rows=1000 cols=12 path=/tmp/data_{n}.csv",
    "REPORT RequestId: {rid} Duration: 12.{n} ms Billed Duration: 13 ms Memory Size: 512 MB",
)


def build_batch(n_events: int) -> dict:
    rng = random.Random(7)
    examples = [c.examples[0] for c in TOKEN_CLASSES]
    events = []
    for i in range(n_events):
        message = rng.choice(LINES).format(rid=f"{rng.getrandbits(64):016x}", n=i)
        if i % 100 == 0:  # 1 % of events carry a token
            message += " " + examples[i // 100 % len(examples)]
        events.append({"id": str(i), "timestamp": 1_795_000_000_000 + i, "message": message})
    document = {
        "messageType": "DATA_MESSAGE",
        "owner": "1",
        "logGroup": "/aws/lambda/x",
        "logStream": "s",
        "subscriptionFilters": ["f"],
        "logEvents": events,
    }
    return {"awslogs": {"data": base64.b64encode(gzip.compress(json.dumps(document).encode())).decode()}}


def test_backstop_throughput(bench_full):
    # Given a batch of 10 000 events (~1 MiB decompressed); 1/50 of that in smoke mode
    n_events = 10_000 if bench_full else 200
    batch = build_batch(n_events)
    raw = batch["awslogs"]["data"]
    size = len(gzip.decompress(base64.b64decode(raw)))

    def bare():
        return json.loads(gzip.decompress(base64.b64decode(raw)))

    def full():
        return scan_events(decode(batch))

    # When
    baseline = best_seconds(bare, repeat=5)
    measured = best_seconds(full, repeat=5)
    result = full()
    ratio = measured / baseline
    # Then
    emit(
        "backstop_throughput",
        target="ratio <= 4 (scan time / bare decode time)",
        ratio=ratio,
        events=n_events,
        decompressed_bytes=size,
        bare_decode_ms=round(baseline * 1e3, 2),
        decode_scan_ms=round(measured * 1e3, 2),
        findings=len(result.findings),
    )
    assert len(result.findings) == (n_events + 99) // 100
    if bench_full:
        assert ratio <= 4
