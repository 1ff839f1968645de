"""Benchmark `cold_import`: how long a cold Lambda container spends importing each
handler module, as a ratio to the cheapest thing any AWS Lambda in Python pays anyway —
`import boto3` plus one client created — measured in the same run. Target: ratio ≤ 1.4 for
every handler (heavy imports stay off the cold path), and ≤ 1.0 for the dispatch handler, whose
capabilities load when their action first runs (`dispatch.routes`), and for the reaper's, whose
settings, tenant models and session runner load when a run first needs them (`reaper.service`).

How it is measured, and why:
- every sample is a fresh interpreter (`sys.executable`, the project's venv), started with the
  environment the function's CDK definition gives it (`infra.cdk.function_env`) and the import path
  Lambda has: `functions/` (LAMBDA_TASK_ROOT) and `layers/common/python` (/opt/python);
- the time is taken INSIDE the child around the import only, so interpreter start-up (which
  Lambda's runtime pays before the handler is imported, for every function alike) is not counted;
- handler and baseline samples are interleaved round-robin so a noisy neighbour hits both;
- `PYTHONDONTWRITEBYTECODE=1`, as machine-wide here: project code is compiled from source in
  each child, as in a Lambda asset that ships no `__pycache__`.
Beside the ratio, one `-X importtime` run per handler names where the time goes (self time per
top-level package), so a missed target points at the import to make lazy.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from sandbox_common import naming as n

from tests.benchmarks._report import emit

pytestmark = pytest.mark.bench

REPO = Path(__file__).resolve().parents[2]
TASK_ROOT = REPO / "functions"
LAYER_ROOT = REPO / "layers" / "common" / "python"
TARGET_RATIO = 1.4
# Handlers held to a tighter ratio than TARGET_RATIO.
STRICT_TARGET_RATIO = 1.0
STRICT_HANDLERS = ("dispatch.handler", "reaper.handler")
BASELINE = "import boto3\nboto3.client('dynamodb', region_name='us-east-1')"
# The child times only the snippet (perf_counter around exec), never its own start-up.
_TIMER = (
    "import sys, time\nt = time.perf_counter()\nexec(sys.argv[1])\nsys.stdout.write(repr(time.perf_counter()"
    " - t))"
)
# Imports that would mean a client or session is being built at import time (an import-time side
# effect and the heavy half of the boto3 baseline): handlers must defer them to first use.
_MUST_STAY_LAZY = ("boto3", "botocore.session", "botocore.client")
# Beyond those, what a handler leaves to the run that first needs it: the reaper's settings,
# pre-flight reader, tenant models (all pydantic) and session runner.
_FIRST_USE_ONLY: dict[str, tuple[str, ...]] = {
    "reaper.handler": ("pydantic", "sandbox_runtime.preflight", "sandbox_runtime.runner"),
}
_IMPORTTIME_LINE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)\s*$")


def handler_modules() -> dict[str, str]:
    """logical function -> handler module, from the CDK handler strings."""
    return {logical: n.handler_string(logical).rpartition(".")[0] for logical in n.FUNCTIONS}


def lambda_env(logical: str | None) -> dict[str, str]:
    """What a Lambda container of `logical` starts with (None: a function with no project env)."""
    from infra.cdk.config import build_config
    from infra.cdk.function_env import function_environment

    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "en_US.UTF-8",
        "TZ": ":UTC",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": os.pathsep.join([str(TASK_ROOT), str(LAYER_ROOT)]),
        "LAMBDA_TASK_ROOT": str(TASK_ROOT),
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    if logical is not None:
        tables = {spec.logical: spec.logical for spec in n.ALL_TABLES}
        env.update(
            function_environment(
                build_config("local"),
                logical,
                tables=tables,
                quota_function_name="quota",
                audit_dlq_url="http://127.0.0.1:1/q",
            )
        )
    return env


def run_child(snippet: str, env: dict[str, str], *extra_args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *extra_args, "-c", _TIMER, snippet],
        env=env,
        cwd=str(TASK_ROOT),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def timed_import(snippet: str, env: dict[str, str]) -> float:
    done = run_child(snippet, env)
    assert done.returncode == 0, f"{snippet!r} failed in a fresh interpreter:\n{done.stderr[-2000:]}"
    return float(done.stdout.strip().splitlines()[-1])


def self_time_by_package(importtime_stderr: str, top: int = 6) -> dict[str, float]:
    """Self import time (ms) summed per top-level package, heaviest first."""
    totals: dict[str, int] = defaultdict(int)
    for line in importtime_stderr.splitlines():
        match = _IMPORTTIME_LINE.match(line)
        if match:
            totals[match.group(4).split(".")[0]] += int(match.group(1))
    heaviest = sorted(totals.items(), key=lambda kv: kv[1], reverse=True)[:top]
    return {package: round(us / 1000, 1) for package, us in heaviest}


def lazy_violations(module: str, env: dict[str, str]) -> list[str]:
    lazy = _MUST_STAY_LAZY + _FIRST_USE_ONLY.get(module, ())
    probe = f"import {module}, sys\nprint(','.join(m for m in {lazy!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        cwd=str(TASK_ROOT),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [m for m in done.stdout.strip().split(",") if m]


def test_self_time_by_package_sums_per_top_level_package() -> None:
    # Given two lines of -X importtime output of one package and one of another
    stderr = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:      1500 |       1500 |     pydantic.main\n"
        "import time:       500 |       2000 |   pydantic\n"
        "import time:       250 |       2250 | dispatch.handler\n"
    )
    # When it is summarised
    summary = self_time_by_package(stderr)
    # Then self times are summed per top-level package, in ms, heaviest first
    assert summary == {"pydantic": 2.0, "dispatch": 0.2}
    assert list(summary) == ["pydantic", "dispatch"]


def test_cold_import_handlers_vs_boto3_client(bench_full: bool) -> None:
    # Given each handler module in a fresh interpreter with its Lambda environment
    modules = handler_modules()
    assert set(modules.values()) == {
        "dispatch.handler",
        "quota_check.handler",
        "backstop.handler",
        "reaper.handler",
    }
    repeat = 11 if bench_full else 3
    baseline_env = lambda_env(None)
    samples: dict[str, list[float]] = {"baseline": [], **{logical: [] for logical in modules}}

    # When each is imported `repeat` times, interleaved with the boto3 + client baseline
    for _ in range(repeat):
        samples["baseline"].append(timed_import(BASELINE, baseline_env))
        for logical, module in modules.items():
            samples[logical].append(timed_import(f"import {module}", lambda_env(logical)))

    # Then report the medians, ratios and where each handler's import time goes
    baseline = statistics.median(samples["baseline"])
    handlers: dict[str, dict[str, object]] = {}
    for logical, module in modules.items():
        profile = run_child(f"import {module}", lambda_env(logical), "-X", "importtime")
        assert profile.returncode == 0, profile.stderr[-2000:]
        median = statistics.median(samples[logical])
        handlers[module] = {
            "median_ms": round(median * 1000, 1),
            "ratio": round(median / baseline, 4),
            "heaviest_self_ms": self_time_by_package(profile.stderr),
        }
    worst = max(float(h["ratio"]) for h in handlers.values())  # type: ignore[arg-type]
    emit(
        "cold_import",
        target=(
            f"every handler's import time / (import boto3 + one client) <= {TARGET_RATIO},"
            f" {' and '.join(STRICT_HANDLERS)} <= {STRICT_TARGET_RATIO}"
        ),
        ratio=worst,
        baseline_median_ms=round(baseline * 1000, 1),
        handlers=handlers,
        runs=repeat,
    )
    # And no handler builds (or even imports the machinery of) a boto3 client at import time:
    # clients come lazily from the cached factories, so moto/the local stack can start first; nor
    # imports what it leaves to first use.
    for logical, module in modules.items():
        assert lazy_violations(module, lambda_env(logical)) == [], (
            f"{module} imports client machinery, or what it leaves to first use, eagerly"
        )
    if bench_full:
        assert worst <= TARGET_RATIO, handlers
        for module in STRICT_HANDLERS:
            assert float(handlers[module]["ratio"]) <= STRICT_TARGET_RATIO, handlers  # type: ignore[arg-type]
