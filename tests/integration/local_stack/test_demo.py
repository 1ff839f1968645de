"""`python -m infra.demo` (what `make demo` runs) as a newcomer runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from infra.local.state import pid_alive

REPO = Path(__file__).resolve().parents[3]


def test_demo_runs_one_turn_end_to_end_and_stops_its_stack() -> None:
    # Given a clean environment (no AWS endpoint variables)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SANDBOX_"))}
    # When the demo runs
    out = subprocess.run(
        [sys.executable, "-m", "infra.demo"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    # Then it exits 0 after a turn whose second call printed 42, shows audit rows and counters
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert '"stdout": "42\\n"' in out.stdout
    assert "DEMO OK" in out.stdout and "Local stack stopped." in out.stdout
    assert "EXIT_STATUS" in out.stdout and re.search(r"^agent_hourly +demo-agent ", out.stdout, re.M)
    # and the files step got a summary CSV and a chart back, both downloaded with matching hashes
    assert "summary.csv" in out.stdout and "figure-1.png" in out.stdout
    assert out.stdout.count("matches") == 2 and "MISMATCH" not in out.stdout
    # and the same CSV came in as an s3_uri from the tenant's data, read with pandas
    assert '"stdout": "total sales 550\\n"' in out.stdout
    # and the tools step: one program, three tool calls answered by resumes, one final summary
    assert out.stdout.count('"action": "resume"') == 3
    assert '"stdout": "total sales 400\\n"' in out.stdout and '"tool_calls": 3' in out.stdout
    # and the jobs step: submitted, polled while running, its result, one background audit row
    assert "get_job -> running, elapsed" in out.stdout and "result: 42" in out.stdout
    assert "the job's audit row: 1 (background: True, job_status: completed)" in out.stdout
    # and the allowlisted turn: the partner API got the tenant's credential from the proxy, the
    # session's answer did not, and the host not allowed is named in the call's audit row
    assert "orders from the partner API: [1042, 1043]" in out.stdout
    assert "the partner API received: Authorization: Bearer demo-" in out.stdout
    assert re.search(
        r'egress: \{"mode": "allowlist", .*"denied_hosts": \["exfil\.example\.net"\]', out.stdout
    )
    # and none of the processes it printed is still running
    pids = [int(line.split("pid")[1].split()[0]) for line in out.stdout.splitlines() if " pid " in line]
    assert len(pids) == 5  # moto, the interpreter, the Lambda emulator, the egress proxy, its index
    assert [p for p in pids if pid_alive(p)] == []
