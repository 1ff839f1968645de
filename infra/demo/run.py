"""`python -m infra.demo` (what `make demo` runs): one agent turn end to end on the local
stack, through the real dispatch function behind the Lambda emulator, printed so a newcomer can
follow it — then the audit rows and the counters, read with the same code `sandboxctl` uses.

The demo starts its own stack in a temporary state directory (a stack you started with
`sandboxctl local up` is left alone) and always stops it, also on error. Exit 0 only if the turn
behaved as the contract says.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sandbox_common import dimensions
from sandbox_common.turn_token import new_token

TENANT, AGENT, TEMPLATE = "acme", "demo-agent", "analyst"


def _show(direction: str, payload: dict[str, Any]) -> None:
    arrow = "agent -> dispatch" if direction == "request" else "dispatch -> agent"
    print(f"\n  {arrow}")
    for line in json.dumps(payload, indent=2, sort_keys=False).splitlines():
        print(f"    {line}")


def run_turn(target: Any) -> tuple[list[str], dict[str, Any]]:
    """begin_turn, `x = 20`, `print(x * 2 + 2)`, end_turn; returns (problems, facts)."""
    from infra.sandboxctl import ops

    turn = f"demo-turn-{uuid.uuid4().hex[:8]}"
    token = new_token()  # one secret per turn, carried by every action of it
    base = {
        "tenant_id": TENANT,
        "agent_id": AGENT,
        "template_id": TEMPLATE,
        "turn_id": turn,
        "turn_token": token,
    }
    steps = [
        (
            "1. begin_turn: pre-flight; the agent learns whether it has the execute_code tool",
            {"action": "begin_turn", **base, "user_id": "u-1"},
        ),
        (
            "2. execute_code: define a variable in the sandbox",
            {
                "action": "execute_code",
                **base,
                "call_id": f"{turn}-c1",
                "code": "x = 20",
                "user_id": "u-1",
                "invocation_source": "chat",
            },
        ),
        (
            "3. execute_code: the same session still has x",
            {
                "action": "execute_code",
                **base,
                "call_id": f"{turn}-c2",
                "code": "print(x * 2 + 2)",
                "user_id": "u-1",
                "invocation_source": "chat",
            },
        ),
        (
            "4. end_turn: the turn's session is stopped",
            {"action": "end_turn", "tenant_id": TENANT, "turn_id": turn, "turn_token": token},
        ),
    ]
    responses = []
    for title, event in steps:
        print(f"\n{title}")
        _show("request", event)
        response = ops.invoke(target, event)
        _show("response", response)
        responses.append(response)
    begin, first, second, end = responses
    problems = []
    if begin.get("sandbox", {}).get("status") != "ready":
        problems.append(f"begin_turn status is {begin.get('sandbox', {}).get('status')!r}, expected 'ready'")
    if not first.get("ok"):
        problems.append(f"first execute_code failed: {first.get('error')}: {first.get('error_message')}")
    if second.get("stdout") != "42\n":
        problems.append(f"second execute_code printed {second.get('stdout')!r}, expected '42\\n'")
    if not first.get("session_id") or first.get("session_id") != second.get("session_id"):
        problems.append("the two calls did not share one session")
    if end != {"ok": True, "stopped": True}:
        problems.append(f"end_turn answered {end}, expected {{'ok': True, 'stopped': True}}")
    return problems, {
        "turn_id": turn,
        "session_id": second.get("session_id"),
        "invocation_ids": [first.get("invocation_id"), second.get("invocation_id")],
    }


def show_audit_and_counters(target: Any, facts: dict[str, Any]) -> list[str]:
    from infra.sandboxctl import ops, records_ops, render
    from infra.sandboxctl.commands import AUDIT_COLUMNS

    problems = []
    rows = (
        records_ops.audit_list(target, TENANT, session_id=facts["session_id"]) if facts["session_id"] else []
    )
    print("\n5. the audit trail (sandboxctl audit list --tenant acme --session <session>)")
    print("\n" + render.table(rows, AUDIT_COLUMNS))
    ids = {r["invocation_id"] for r in rows}
    if ids != set(facts["invocation_ids"]):
        problems.append(
            f"expected one audit row per call ({len(facts['invocation_ids'])}), found {len(rows)}"
        )
    counters = ops.counters_show(target, TENANT, AGENT)
    print(f"\n6. the circuit-breaker counters (sandboxctl counters show --tenant {TENANT} --agent {AGENT})\n")
    print(
        render.table(ops.counter_rows(counters), ["dimension", "key", "window", "count", "cap", "resets_at"])
    )
    hourly = dimensions.AGENT_HOURLY.name
    if counters[hourly][0]["count"] != 2:
        problems.append(f"{hourly} count is {counters[hourly][0]['count']}, expected 2 (one per call)")
    return problems


DEMO_CSV = (
    "region,product,amount\n"
    "eu,widgets,120\neu,gadgets,80\nus,widgets,200\nus,gadgets,50\napac,widgets,70\napac,gadgets,30\n"
)
DEMO_CODE = """import pandas as pd
import matplotlib.pyplot as plt
import os
sales = pd.read_csv('data/sales.csv')
summary = sales.groupby('region', as_index=False)['amount'].sum().sort_values('amount', ascending=False)
os.makedirs('outputs', exist_ok=True)
summary.to_csv('outputs/summary.csv', index=False)
summary.plot.bar(x='region', y='amount', legend=False, title='Sales by region')
plt.tight_layout()
print(summary.to_string(index=False))
"""


def files_step(target: Any, turn: str) -> list[str]:
    """A CSV in, a summary CSV and a chart out, both downloaded and checked against their sha256."""
    import base64
    import hashlib
    import urllib.request

    from infra.sandboxctl import ops

    print(
        "\n7. a second turn: execute_code with a file: a CSV in, a summary CSV (outputs/) and a chart (an"
        " open figure) out"
    )
    token = new_token()
    event = {
        "action": "execute_code",
        "tenant_id": TENANT,
        "agent_id": AGENT,
        "template_id": TEMPLATE,
        "turn_id": turn,
        "turn_token": token,
        "call_id": f"{turn}-files",
        "code": DEMO_CODE,
        "files": [{"path": "data/sales.csv", "content_base64": base64.b64encode(DEMO_CSV.encode()).decode()}],
    }
    shown = {
        **event,
        "files": [{"path": "data/sales.csv", "content_base64": f"<{len(DEMO_CSV)} bytes, base64>"}],
    }
    _show("request", shown)
    response = ops.invoke(target, event)
    _show("response", response)
    problems = []
    if not response.get("ok"):
        return [f"the files call failed: {response.get('error')}: {response.get('error_message')}"]
    names = sorted(f.get("filename") for f in response.get("files", []))
    if names != ["figure-1.png", "summary.csv"]:
        problems.append(f"expected summary.csv and figure-1.png back, got {names}")
    print("\n8. download both (get_file -> presigned URL), check sizes and hashes")
    for entry in response.get("files", []):
        got = ops.invoke(target, {"action": "get_file", "tenant_id": TENANT, "file_id": entry["file_id"]})
        if not got.get("ok"):
            problems.append(f"get_file {entry['file_id']} failed: {got.get('error_message')}")
            continue
        with urllib.request.urlopen(got["url"]) as answer:
            data = answer.read()
        digest = hashlib.sha256(data).hexdigest()
        ok = digest == entry["sha256"] and len(data) == entry["bytes"]
        print(
            f"  {entry['filename']:<14} {len(data):>7} bytes  sha256 {digest} "
            f" {'matches' if ok else 'MISMATCH'}"
        )
        if not ok:
            problems.append(f"{entry['filename']}: downloaded bytes do not match the artifact's size/sha256")
    problems += s3_input_step(target, event)
    ops.invoke(target, {"action": "end_turn", "tenant_id": TENANT, "turn_id": turn, "turn_token": token})
    return problems


S3_KEY = f"{TENANT}/2026/sales.csv"  # under acme's data.read prefix (the local stage's config)
S3_CODE = """import pandas as pd
sales = pd.read_csv('data/sales.csv')
print('total sales', sales['amount'].sum())
"""


def s3_input_step(target: Any, files_event: dict[str, Any]) -> list[str]:
    """The same CSV from the tenant's own data: an s3_uri under its data.read prefix, copied into the
    session with the tenant's grant (in the emulated S3 here, with the execution role on AWS)."""
    from sandbox_common import naming as n

    from infra.sandboxctl import ops

    bucket = n.demo_data_bucket_name(target.stage)
    print(
        f"\n9. the tenant's own data: the CSV put at s3://{bucket}/{S3_KEY} (acme's data.read prefix),"
        " then execute_code with it as an s3_uri"
    )
    target.client("s3").put_object(Bucket=bucket, Key=S3_KEY, Body=DEMO_CSV.encode())
    event = {
        **files_event,
        "call_id": f"{files_event['call_id']}-s3",
        "code": S3_CODE,
        "files": [{"path": "data/sales.csv", "s3_uri": f"s3://{bucket}/{S3_KEY}"}],
    }
    _show("request", event)
    response = ops.invoke(target, event)
    _show("response", response)
    expected = sum(int(line.rsplit(",", 1)[1]) for line in DEMO_CSV.splitlines()[1:])
    if response.get("stdout") != f"total sales {expected}\n":
        return [f"the s3_uri call did not print the total: {response}"]
    return []


JOB_CODE = """import time
for step in range(1, 4):
    print(f'step {step}/3 done', flush=True)
    time.sleep(1)
print('result: 42')
"""


def jobs_step(target: Any) -> list[str]:
    """A background job through the agent client: submitted (answers at once), polled with a
    progress callback while it runs, its result; end_turn then has nothing pending; one audit row."""
    from sandbox_client.errors import SandboxRefused
    from sandbox_client.results import JobResult
    from sandbox_client.turn import SandboxTurn

    from infra.sandboxctl import records_ops

    print("\n11. a fourth turn: a background job (execute_code with background: true), polled until it ends")
    turn = SandboxTurn(
        target.dispatch_function,
        tenant_id=TENANT,
        agent_id=AGENT,
        template_id=TEMPLATE,
        lambda_client=target.client("lambda"),
        invocation_source="chat",
    )
    turn.begin()
    _show(
        "request",
        {"action": "execute_code", "background": True, "timeout_s": 60, "code": JOB_CODE, "...": "ids"},
    )
    try:
        submitted = turn.submit(JOB_CODE, timeout_s=60)
    except SandboxRefused as refused:  # a cap, a disabled tenant: the client raises what dispatch refused
        _show("response", refused.raw)
        return [f"the job was not started: {refused.error}: {refused.error_message}"]
    _show("response", submitted.raw)
    if not submitted.running or submitted.job_id is None:
        return [f"the job was not started: {submitted.error}: {submitted.error_message}"]
    seen: list[int] = []

    def progress(answer: JobResult) -> None:  # the agent client's progress callback
        seen.append(int(answer.elapsed_ms or 0))
        print(f"  get_job -> running, elapsed {(answer.elapsed_ms or 0) / 1000:.1f} s")

    final = turn.wait(submitted.job_id, progress=progress, poll_seconds=0.7, timeout_s=60)
    _show("response", final.raw)
    ended = turn.end()
    problems = []
    if final.status != "completed" or "result: 42" not in final.stdout:
        problems.append(f"the job answered {final.status!r} / {final.stdout!r}, expected its result")
    if not seen:
        problems.append("get_job never answered `running` while the job ran")
    if ended.get("pending_jobs"):
        problems.append(f"end_turn still lists pending jobs after the job ended: {ended['pending_jobs']}")
    rows = [
        r
        for r in records_ops.audit_list(target, TENANT, session_id=str(submitted.session_id))
        if r["invocation_id"] == submitted.invocation_id
    ]
    print(
        f"\n  the job's audit row: {len(rows)} (background: {rows[0].get('background') if rows else None}, "
        f"job_status: {rows[0].get('job_status') if rows else None})"
    )
    if len(rows) != 1 or rows[0].get("background") is not True:
        problems.append(f"expected one background audit row for the job, found {len(rows)}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the stack running (prints its state dir)")
    args = parser.parse_args(argv)

    from infra.demo import egress_step as demo_egress
    from infra.demo import tools_step as demo_tools
    from infra.local import stack
    from infra.local.state import LocalStackError
    from infra.sandboxctl.errors import CtlError
    from infra.sandboxctl.target import local_target

    directory = Path(tempfile.mkdtemp(prefix="sandbox-demo-"))
    print("== execute_code demo on the local stack ==")
    print(
        "Starting moto (DynamoDB, SSM, SQS, ...), the local AgentCore Code Interpreter, the Lambda"
        " emulator and the egress proxy with its package index..."
    )
    started = time.monotonic()
    problems: list[str] = []
    # the partner API of the allowlisted turn: an HTTPS server of the demo's own, on loopback,
    # which the egress proxy reaches through the stack's test route (egress_step.py)
    api = demo_egress.DemoApi()
    routed = {k: os.environ.get(k) for k in api.routes()}
    try:
        os.environ.update(api.routes())  # read by `local up`
        state, _ = stack.up(directory)
        for name, proc in state.data["processes"].items():
            print(f"  {name:<12} pid {proc['pid']:<7} {proc['endpoint']}")
        print(f"  (ready in {time.monotonic() - started:.1f}s; state in {directory})")
        target = local_target(state)
        demo_tools.prepare(target)  # the template's tool allowlist, before any pre-flight is cached
        problems, facts = run_turn(target)
        problems += show_audit_and_counters(target, facts)
        problems += files_step(target, f"{facts['turn_id']}-files")
        print(
            "\n10. a third turn: programmatic tool calling — the code calls the agent's query_sales tool in a"
            " loop; each call pauses the code, the agent runtime runs the tool and resumes it"
        )
        problems += demo_tools.run_tools_step(target, f"{facts['turn_id']}-tools", _show)
        problems += jobs_step(target)
        problems += demo_egress.run_egress_step(target, api, f"{facts['turn_id']}-egress", _show)
    except (CtlError, LocalStackError) as exc:
        problems.append(str(exc))
    except Exception as exc:  # noqa: BLE001 - the demo reports, it never dumps a traceback on a newcomer
        problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        api.close()
        for key, value in routed.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if args.keep:
            print(f"\nThe stack keeps running: SANDBOX_LOCAL_DIR={directory} sandboxctl --local local down")
        else:
            stack.down(directory)
            shutil.rmtree(directory, ignore_errors=True)
            print("\nLocal stack stopped.")
    if problems:
        print("\nDEMO FAILED:", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    print(
        "\nDEMO OK: one turn, two calls sharing state in one session, two audit rows, two counted calls;"
        " a CSV in, a summary CSV and a chart out, both downloaded with matching sha256;"
        " the same CSV read from the tenant's own data in S3 (an s3_uri);"
        " one program calling the agent's tool 3 times, answered by 3 resumes, one audit row;"
        " a background job polled while running, its result and its one audit row;"
        " an allowlisted turn reaching a partner API with the tenant's credential added at the egress,"
        " a host not allowed refused and named in its audit row."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
