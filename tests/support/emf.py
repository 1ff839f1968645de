"""Reading the EMF (CloudWatch embedded metric format) lines a test captured from stdout."""

from __future__ import annotations

import json
from typing import Any


def emf_records(out: str) -> list[dict[str, Any]]:
    """Every EMF record among the captured lines (log lines and other output are skipped)."""
    records = []
    for line in out.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            records.append(json.loads(line))
    return records


def metric_names(out: str) -> list[str]:
    """The metric names of every EMF record, in order (a name repeats once per emission)."""
    return [m["Name"] for r in emf_records(out) for d in r["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]]
