"""`sandboxctl` command implementations: resolve the target, call one operation, render."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from sandbox_common import dimensions
from sandbox_common import naming as n

from infra.local.state import LocalStackError
from infra.sandboxctl import egress_cli, render, sessions_cli
from infra.sandboxctl.errors import EXIT_FAILURE, EXIT_OK, CtlError


def _out(args: argparse.Namespace, data: Any, human: Callable[[], str]) -> None:
    print(render.to_json(data) if args.json else human())


def run(args: argparse.Namespace) -> int:
    if args.command == "local":
        return _local(args)
    if args.command == "mcp":
        return _mcp(args)  # serves even when its target cannot be reached (it says what to fix)
    from infra.sandboxctl import deploy_cli

    if deploy_cli.handles(args):  # the stage's data and its account, not a running stack
        return deploy_cli.run(args)
    from infra.sandboxctl import target as target_mod

    target = target_mod.resolve(args.stage, args.local)
    handler = {
        "invoke": _invoke,
        "caps": _caps,
        "tenant": _tenant,
        "template": _template,
        "audit": _audit,
        "counters": _counters,
        "findings": _findings,
        "pilot": _pilot,
        "files": _files,
        "jobs": _jobs,
        "warm": sessions_cli.run_warm,
        "sessions": sessions_cli.run_sessions,
        "usage": _usage,
        "egress": egress_cli.run_egress,
        "secrets": egress_cli.run_secrets,
    }[args.command]
    return handler(args, target)


# --- local -----------------------------------------------------------------------------------
def _local(args: argparse.Namespace) -> int:
    from infra.local import stack

    stage = args.stage
    try:
        if args.local_command == "up":
            state, started = stack.up(stage=stage)
            data = {
                "started": started,
                "state_dir": str(state.directory),
                "stage": state.data["stage"],
                "endpoints": {name: p["endpoint"] for name, p in state.data["processes"].items()},
                # what an agent invokes (Lambda Invoke at the lambda endpoint): SandboxTurn's first
                # argument, an MCP host needs none (`sandboxctl --local mcp` finds it)
                "dispatch_function": state.resources.functions[n.DISPATCH],
                "pids": {name: p["pid"] for name, p in state.data["processes"].items()},
                "environment": state.client_environment(),
            }

            def human() -> str:
                head = "local stack started" if started else "local stack already running"
                rows = [
                    {"component": k, "pid": data["pids"][k], "endpoint": v}
                    for k, v in data["endpoints"].items()
                ]
                env = "\n".join(f"export {k}={v}" for k, v in data["environment"].items())
                return (
                    f"{head} (stage {data['stage']}, state {data['state_dir']})\n"
                    + render.table(rows, ["component", "pid", "endpoint"])
                    + f"\ndispatch function: {data['dispatch_function']} (invoked at the lambda endpoint)"
                    + f"\n\n# point boto3 at it:\n{env}"
                )

            _out(args, data, human)
        elif args.local_command == "down":
            data = stack.down()
            _out(
                args,
                data,
                lambda: (
                    "stopped: "
                    + (
                        ", ".join(f"{s['component']} (pid {s['pid']})" for s in data["stopped"])
                        or "nothing was running"
                    )
                ),
            )
        else:
            data = stack.status()
            rows = [{"component": k, **v} for k, v in data["processes"].items()]
            _out(
                args,
                data,
                lambda: (
                    ("running" if data["running"] else "not running")
                    + f" (state {data['state_dir']})\n"
                    + render.table(rows, ["component", "pid", "alive", "endpoint", "log"])
                    + _isolation_line(data.get("isolation"))
                    + _egress_line(data.get("egress"))
                    + (
                        "\ninterpreters: " + ", ".join(data["interpreters"])
                        if data.get("interpreters")
                        else ""
                    )
                ),
            )
    except LocalStackError as exc:
        raise CtlError(str(exc)) from None
    return EXIT_OK


def _egress_line(egress: dict[str, Any] | None) -> str:
    """The egress proxy sessions of allowlist environments go through, and the CA they trust."""
    if not egress:
        return "\negress proxy: none (make egress-runtime); allowlist sessions cannot start"
    return (
        f"\negress proxy: {egress['proxy']} (CA certificate {egress['ca_cert']});"
        f" package index {egress['index_url']}"
    )


def _isolation_line(isolation: dict[str, Any] | None) -> str:
    """One paragraph: the isolation the local interpreter enforces."""
    if not isolation:
        return ""
    if isolation.get("strategy") == "bwrap":
        limits = isolation["limits"]
        return (
            f"\n\nisolation: bwrap; uid: {isolation['uid']}\n  network SANDBOX:"
            f" {isolation['network']['SANDBOX']}\n  network PUBLIC: {isolation['network']['PUBLIC']}\n "
            f" limits ({limits['mechanism']}): memory {limits['session_memory']},"
            f" {limits['process_memory_mb']} MiB per process; {limits['session_tasks']} tasks per session;"
            f" {limits['cpu_seconds_per_process']} CPU-s per process; files {limits['file_size_mb']} MiB;"
            f" disk ({isolation['disk']['kind']}) {isolation['disk']['mb']} MiB,"
            f" {isolation['disk']['files']} files: {isolation['disk']['holds']}"
        )
    if isolation.get("strategy") == "unisolated":
        return f"\n\nisolation: NONE. WARNING: {isolation['warning']}"
    return f"\n\nisolation: unavailable, every session is refused: {isolation.get('refusing')}"


# --- dispatch --------------------------------------------------------------------------------
def _invoke(args: argparse.Namespace, target: Any) -> int:
    from infra.sandboxctl import ops

    try:
        event = json.loads(_event_text(args.event))
    except ValueError as exc:
        raise CtlError(f"the event is not valid JSON: {exc}") from None
    response = ops.invoke(target, event)
    print(json.dumps(response, indent=None if args.json else 2, sort_keys=True))
    if isinstance(response, dict) and response.get("ok") is False:
        # The answer is printed whole; a script sees the failure in the exit status, a person the
        # named class and its sentence on stderr.
        error = response.get("error") or "SandboxError"
        message = " ".join(str(response.get("error_message") or "").split())
        print(f"sandboxctl: dispatch answered ok: false: {error}: {message}".rstrip(": "), file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def _event_text(arg: str) -> str:
    """`-` reads the event from standard input, `@PATH` from a file, anything else is
    the event itself (one argument is limited to 128 KiB; stdin and files are not)."""
    if arg == "-":
        return sys.stdin.read()
    if arg.startswith("@"):
        path = arg[1:]
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise CtlError(
                f"cannot read the event from {path!r}: {type(exc).__name__}: {exc.args[-1]}"
            ) from None
    return arg


# --- caps ------------------------------------------------------------------------------------
def _caps(args: argparse.Namespace, target: Any) -> int:
    from infra.sandboxctl import ops

    if args.caps_command == "get":
        data = ops.caps_get(target, args.tenant)

        def human() -> str:
            rows = [{"scope": "global", **data["global"]}]
            rows += [{"scope": f"tenant {t}", **v} for t, v in sorted(data["overrides"].items())]
            text = render.table(rows, ["scope", *dimensions.names()])
            if "effective" in data:
                text += f"\n\neffective for {data['tenant_id']}: " + ", ".join(
                    f"{k}={v}" for k, v in data["effective"].items()
                )
            return text

        _out(args, data, human)
    elif args.caps_command == "set":
        data = ops.caps_set(target, args.dimension, args.value, args.tenant)
        _out(
            args,
            data,
            lambda: (
                f"{data['parameter']} = {data['value']} (was"
                f" {'unset' if data['previous'] is None else data['previous']})" + _kill_line(data)
            ),
        )
    else:
        data = ops.caps_unset(target, args.dimension, args.tenant)
        _out(args, data, lambda: f"{data['parameter']} " + ("deleted" if data["deleted"] else "was not set"))
    return EXIT_OK


# --- tenants and templates -------------------------------------------------------------------
def _tenant(args: argparse.Namespace, target: Any) -> int:
    from infra.sandboxctl import ops

    if args.tenant_command == "show":
        data = ops.tenant_show(target, args.tenant)

        def human() -> str:
            head = render.pairs(
                {
                    "tenant": data["tenant_id"],
                    "sandbox_enabled": data["sandbox_enabled"],
                    "compliance_tier": data["compliance_tier"],
                    "environments": ", ".join(data["environments"]) or "-",
                    "updated_by": (data["policy"] or {}).get("updated_by"),
                    "updated_at": (data["policy"] or {}).get("updated_at"),
                }
            )
            templates = render.table(
                [
                    {"template": k, **v, "tools": ",".join(v.get("tools") or [])}
                    for k, v in sorted(data["templates"].items())
                ],
                ["template", "environment", "tools", "source"],
            )
            history = render.table(data["history"], ["changed_at", "changed_by", "action", "before", "after"])
            return f"{head}\n\ntemplates\n{templates}\n\nhistory\n{history}"

        _out(args, data, human)
        return EXIT_OK
    if args.tenant_command == "enable":
        data = ops.tenant_set(target, args.tenant, enabled=True)
    elif args.tenant_command == "disable":
        data = ops.tenant_set(target, args.tenant, enabled=False)
    else:
        data = ops.tenant_set(target, args.tenant, tier=args.tier)
    _out(
        args,
        data,
        lambda: (
            f"{data['tenant_id']}: {data['action']}: {data['before']} -> {data['after']}" + _kill_line(data)
        ),
    )
    return EXIT_OK


def _kill_line(data: dict[str, Any]) -> str:
    """What a change that kills did about the admitted work (ops.kill_switch_now)."""
    said = data.get(n.KILL_SWITCH_EVENT_KEY)
    return f"\nrunning jobs and warm sessions: stop {said}" if said else ""


def _template(args: argparse.Namespace, target: Any) -> int:
    from infra.sandboxctl import ops

    data = ops.template_put(target, args.tenant, args.template, args.environment, tools=args.tools)
    _out(
        args,
        data,
        lambda: (
            f"{data['tenant_id']}/{data['template_id']}: sandbox environment "
            f"{data['environment'] or 'none'} (was {data['previous'] or 'none'}); "
            f"tools {','.join(data['tools']) or 'none'} (was {','.join(data['previous_tools']) or 'none'})"
        ),
    )
    return EXIT_OK


# --- audit, counters, findings ---------------------------------------------------------------
AUDIT_COLUMNS = [
    "started_at",
    "invocation_id",
    "agent_id",
    "session_id",
    "exit_status",
    "error",
    "duration_ms",
    "stdout_bytes",
]


def _audit(args: argparse.Namespace, target: Any) -> int:
    from infra.sandboxctl import records_ops

    if args.audit_command == "list":
        rows = records_ops.audit_list(
            target,
            args.tenant,
            agent_id=args.agent,
            session_id=args.session,
            since=args.since,
            limit=args.limit,
        )
        _out(args, rows, lambda: render.table(rows, AUDIT_COLUMNS))
        return EXIT_OK
    counts = records_ops.audit_replay(target)
    _out(args, counts, lambda: render.pairs(counts))
    if counts["failed"] or counts["invalid"]:
        raise CtlError(
            f"{counts['failed']} row(s) failed to replay and {counts['invalid']} message(s) are not audit "
            "rows; they stay in the queue"
        )
    return EXIT_OK


FILES_COLUMNS = ["created_at", "file_id", "filename", "bytes", "content_type", "turn_id", "sha256"]


def _files(args: argparse.Namespace, target: Any) -> int:
    from infra.sandboxctl import records_ops

    if args.files_command == "list":
        rows = records_ops.files_list(target, args.tenant, args.turn)
        _out(args, rows, lambda: render.table(rows, FILES_COLUMNS))
        return EXIT_OK
    got = records_ops.files_get(target, args.tenant, args.file_id, args.output)
    _out(args, got, lambda: render.pairs(got))
    return EXIT_OK


def _counters(args: argparse.Namespace, target: Any) -> int:
    from infra.sandboxctl import ops

    data = ops.counters_show(target, args.tenant, args.agent)

    def human() -> str:
        return f"now {data['now']}\n" + render.table(
            ops.counter_rows(data), ["dimension", "key", "window", "count", "cap", "resets_at"]
        )

    _out(args, data, human)
    return EXIT_OK


def _findings(args: argparse.Namespace, target: Any) -> int:
    from infra.sandboxctl import records_ops

    rows = records_ops.findings_list(target, since=args.since, limit=args.limit)
    columns = [
        "timestamp",
        "token_class",
        "log_group",
        "log_stream",
        "event_id",
        "fingerprint",
        "tenant_id",
        "session_id",
    ]
    _out(args, rows, lambda: render.table(rows, columns))
    return EXIT_OK


def _pilot(args: argparse.Namespace, target: Any) -> int:
    from infra.sandboxctl import pilot

    report = pilot.run_pilot(
        target,
        tenant_id=args.tenant,
        template_id=args.template,
        cap_wait_seconds=args.cap_wait,
        echo=None if args.json else print,
    )
    if args.json:
        print(render.to_json(report))
    if not report["ok"]:
        failed = [c["check"] for c in report["checks"] if not c["ok"]]
        raise CtlError(f"pilot failed: {'; '.join(failed) or report.get('error')}")
    return EXIT_OK if report["ok"] else EXIT_FAILURE


# --- background jobs ----------------------------------------------------------------
JOB_COLUMNS = [
    n.JOB_ATTR_SUBMITTED_AT,
    "job_id",
    "tenant_id",
    "agent_id",
    "turn_id",
    "status",
    "elapsed_ms",
    "session_id",
]


def _jobs(args: argparse.Namespace, target: Any) -> int:
    from infra.sandboxctl import jobs_ops

    rows = jobs_ops.jobs_list(target, tenant_id=args.tenant, limit=args.limit)
    _out(args, rows, lambda: render.table(rows, JOB_COLUMNS))
    return EXIT_OK


# --- usage, mcp ---------------------------------------------------------------------
def _usage(args: argparse.Namespace, target: Any) -> int:
    import sys

    from infra.sandboxctl import items, usage

    progress = usage.StderrProgress(sys.stderr)
    try:
        report = usage.usage_report(
            target.client("dynamodb"),
            target.table(n.INVOCATIONS),
            args.tenant,
            by=args.by,
            since=items.parse_time(args.since) if args.since else None,
            until=items.parse_time(args.until) if args.until else None,
            progress=progress,
        )
    except ValueError as exc:
        raise CtlError(str(exc)) from None
    finally:
        progress.done()
    if args.csv:
        with open(args.csv, "w", encoding="utf-8", newline="") as handle:
            handle.write(usage.to_csv(report))

    def human() -> str:
        columns = [
            "group",
            "calls",
            "calls_by_exit_status",
            "sessions",
            "wall_time_ms",
            "estimated_cost_usd",
            "rows_without_cost",
        ]
        rows = [*report["groups"], {"group": "total", **report["totals"]}]
        window = f"{report['since'] or 'first row'} .. {report['until'] or 'now'}"
        notes = "\n".join(f"note: {line}" for line in report["notes"])
        return f"usage of tenant {report['tenant_id']} ({window})\n{render.table(rows, columns)}\n{notes}"

    _out(args, report, human)
    return EXIT_OK


def _mcp(args: argparse.Namespace) -> int:
    from sandbox_client import mcp_server
    from sandbox_client.errors import DispatchUnavailable

    from infra.sandboxctl import target as target_mod

    def connect() -> tuple[Any, str]:
        """The target's Lambda client and dispatch, resolved when the MCP session needs them (and
        again to say what to fix when dispatch cannot be reached)."""
        try:
            target = target_mod.resolve(args.stage, args.local)
            return target.client("lambda"), target.dispatch_function
        except CtlError as exc:
            raise DispatchUnavailable(str(exc)) from None

    mcp_server.serve(
        connect=connect,
        tenant_id=args.tenant,
        agent_id=args.agent,
        template_id=args.template,
        turn_id=args.turn,
        user_id=args.user,
    )
    return EXIT_OK
