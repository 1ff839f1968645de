"""Argument parsing and exit-code mapping for `sandboxctl`.

Exit codes: 0 success, 2 bad usage (argparse), 1 failure with a one-line reason on
stderr and never a traceback. The command implementations live in `commands.py`; this module
only knows the command-line shape, so `build_parser()` is cheap to import (the runbook tests
parse every documented command line with it).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from sandbox_common import dimensions
from sandbox_common import naming as n

from infra.sandboxctl.errors import EXIT_FAILURE, CtlError

DEFAULT_STAGE = "dev"


def _non_negative_int(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"{value} is negative; caps are non-negative integers (0 = kill switch)"
        )
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _tenant_id(text: str) -> str:
    if not n.TENANT_ID_RE.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a tenant id ({n.TENANT_ID_RE.pattern})")
    return text


def _request_id(text: str) -> str:
    if not n.REQUEST_ID_RE.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid id ({n.REQUEST_ID_RE.pattern})")
    return text


def _tool_names(text: str) -> tuple[str, ...]:
    from sandbox_common.tool_spec import validate_tool_names

    try:
        return validate_tool_names(text.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _iso_time(text: str) -> str:
    from datetime import datetime

    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO-8601 time (e.g. 2026-11-21T08:00:00Z)"
        ) from None
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandboxctl",
        description="Operate the execute_code sandbox: caps, tenants, templates, audit, local stack.",
    )
    parser.add_argument(
        "--stage", default=None, help=f"stage name (default: {DEFAULT_STAGE}, or 'local' with --local)"
    )
    parser.add_argument(
        "--local",
        action="store_true",
        default=None,
        help="talk to the local stack (also when SANDBOX_LOCAL=1)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    # The global options are also accepted after the command (`sandboxctl caps get --json`): the
    # leaf parsers share them with SUPPRESS defaults so they never overwrite a value given earlier.
    late = argparse.ArgumentParser(add_help=False)
    late.add_argument("--stage", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    late.add_argument("--local", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    late.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    _add_local_and_invoke(commands, late)
    _add_caps_and_tenants(commands, late)
    _add_templates_and_audit(commands, late)
    _add_findings_files_jobs(commands, late)
    _add_pilot(commands, late)
    from infra.sandboxctl import egress_cli, sessions_cli  # argparse only: as cheap as this module

    sessions_cli.add_commands(
        commands, late, tenant_id=_tenant_id, non_negative=_non_negative_int, request_id=_request_id
    )
    egress_cli.add_commands(commands, late, tenant_id=_tenant_id, request_id=_request_id)
    _add_usage_and_mcp(commands, late)
    return parser


def _add_local_and_invoke(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], late: argparse.ArgumentParser
) -> None:
    """`local up|down|status` and `invoke`."""
    local = commands.add_parser("local", help="start/stop/inspect the embedded local stack")
    local_cmd = local.add_subparsers(dest="local_command", metavar="ACTION", required=True)
    local_cmd.add_parser("up", help="start the local stack in the background (idempotent)", parents=[late])
    local_cmd.add_parser("down", help="stop the processes the local stack started", parents=[late])
    local_cmd.add_parser("status", help="show the local stack's processes and endpoints", parents=[late])

    invoke = commands.add_parser(
        "invoke", help="invoke dispatch with a JSON event and print its response", parents=[late]
    )
    invoke.add_argument(
        "event",
        help='the dispatch event as JSON, e.g. \'{"action": "begin_turn", ...}\'; '
        "`-` reads it from standard input, `@PATH` from a file",
    )


def _add_caps_and_tenants(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], late: argparse.ArgumentParser
) -> None:
    """`caps`, `tenant` (and the deploy commands of tenants) and `doctor`."""
    caps = commands.add_parser("caps", help="read/write the circuit-breaker caps in SSM")
    caps_cmd = caps.add_subparsers(dest="caps_command", metavar="ACTION", required=True)
    caps_get = caps_cmd.add_parser("get", help="show global caps and per-tenant overrides", parents=[late])
    caps_get.add_argument("--tenant", type=_tenant_id, help="only this tenant's effective caps")
    caps_set = caps_cmd.add_parser("set", help="set a cap (0 = kill switch)", parents=[late])
    caps_set.add_argument("dimension", choices=dimensions.names())
    caps_set.add_argument("value", type=_non_negative_int, help="non-negative integer")
    caps_set.add_argument(
        "--tenant", type=_tenant_id, help="set the per-tenant override instead of the global cap"
    )
    caps_unset = caps_cmd.add_parser(
        "unset", help="remove a per-tenant override (the global cap applies again)", parents=[late]
    )
    caps_unset.add_argument("dimension", choices=[d.name for d in dimensions.dimensions() if d.per_tenant])
    caps_unset.add_argument("--tenant", type=_tenant_id, required=True)

    tenant = commands.add_parser("tenant", help="tenant sandbox policy")
    tenant_cmd = tenant.add_subparsers(dest="tenant_command", metavar="ACTION", required=True)
    for action, text in (
        ("show", "show policy, tier, templates"),
        ("enable", "enable the sandbox"),
        ("disable", "disable the sandbox"),
    ):
        sub = tenant_cmd.add_parser(action, help=text, parents=[late])
        sub.add_argument("tenant", type=_tenant_id)
    set_tier = tenant_cmd.add_parser(
        "set-tier", help="set the compliance tier (non-standard also disables)", parents=[late]
    )
    set_tier.add_argument("tenant", type=_tenant_id)
    set_tier.add_argument("tier", choices=n.COMPLIANCE_TIERS)
    from infra.sandboxctl import deploy_cli  # argparse only: as cheap as this module

    deploy_cli.add_tenant_commands(tenant_cmd, late, tenant_id=_tenant_id)
    deploy_cli.add_doctor(commands, late)


def _add_templates_and_audit(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], late: argparse.ArgumentParser
) -> None:
    """`template put`, `audit list|replay`, `counters show`."""
    template = commands.add_parser("template", help="templates' sandbox blocks")
    template_cmd = template.add_subparsers(dest="template_command", metavar="ACTION", required=True)
    put = template_cmd.add_parser(
        "put", help="set a template's sandbox environment (none = no sandbox block)", parents=[late]
    )
    put.add_argument("tenant", type=_tenant_id)
    put.add_argument("template", type=_request_id)
    put.add_argument("--environment", required=True, choices=(*n.ENVIRONMENTS, "none"))
    put.add_argument(
        "--tools",
        type=_tool_names,
        default=None,
        metavar="NAME[,NAME...]",
        help="agent tools callable from code (allowlist; '' clears it; omitted keeps the current one)",
    )

    audit = commands.add_parser("audit", help="the audit trail")
    audit_cmd = audit.add_subparsers(dest="audit_command", metavar="ACTION", required=True)
    audit_list = audit_cmd.add_parser("list", help="audit rows of a tenant, newest first", parents=[late])
    audit_list.add_argument("--tenant", type=_tenant_id, required=True)
    audit_list.add_argument("--agent", type=_request_id)
    audit_list.add_argument("--session", type=_request_id)
    audit_list.add_argument("--since", type=_iso_time, help="ISO-8601 UTC, e.g. 2026-11-21T00:00:00Z")
    audit_list.add_argument("--limit", type=_positive_int, default=20)
    audit_cmd.add_parser(
        "replay", help="drain the audit dead-letter queue into the audit table (exactly once)", parents=[late]
    )

    counters = commands.add_parser("counters", help="circuit-breaker counters")
    counters_cmd = counters.add_subparsers(dest="counters_command", metavar="ACTION", required=True)
    show = counters_cmd.add_parser(
        "show", help="current UTC window counts and effective caps", parents=[late]
    )
    show.add_argument("--tenant", type=_tenant_id, required=True)
    show.add_argument("--agent", type=_request_id)


def _add_findings_files_jobs(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], late: argparse.ArgumentParser
) -> None:
    """`findings list`, `files list|get`, `jobs list`."""
    findings = commands.add_parser("findings", help="redaction backstop findings")
    findings_cmd = findings.add_subparsers(dest="findings_command", metavar="ACTION", required=True)
    findings_list = findings_cmd.add_parser(
        "list",
        help="backstop findings at or after --since (default: the last 24 h), newest first",
        parents=[late],
    )
    findings_list.add_argument("--since", type=_iso_time)
    findings_list.add_argument("--limit", type=_positive_int, default=100)

    files = commands.add_parser("files", help="artifacts stored by execute_code")
    files_cmd = files.add_subparsers(dest="files_command", metavar="ACTION", required=True)
    files_list = files_cmd.add_parser("list", help="a tenant's artifacts, newest first", parents=[late])
    files_list.add_argument("--tenant", type=_tenant_id, required=True)
    files_list.add_argument("--turn", type=_request_id)
    files_get = files_cmd.add_parser(
        "get", help="download one artifact (its sha256 is verified)", parents=[late]
    )
    files_get.add_argument("file_id")
    files_get.add_argument("--tenant", type=_tenant_id, required=True)
    files_get.add_argument("-o", "--output", required=True, help="path to write the bytes to")
    jobs = commands.add_parser("jobs", help="background jobs (execute_code with background: true)")
    jobs_cmd = jobs.add_subparsers(dest="jobs_command", metavar="ACTION", required=True)
    jobs_list = jobs_cmd.add_parser(
        "list", help="jobs, newest first (all tenants unless --tenant)", parents=[late]
    )
    jobs_list.add_argument("--tenant", type=_tenant_id)
    jobs_list.add_argument("--limit", type=_positive_int, default=50)


def _add_pilot(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], late: argparse.ArgumentParser
) -> None:
    """`pilot`, the post-deploy canary."""
    pilot = commands.add_parser(
        "pilot", help="post-deploy canary: one scripted turn, checked end to end", parents=[late]
    )
    pilot.add_argument(
        "--tenant", type=_tenant_id, help="tenant to run the canary turn as (default: first configured)"
    )
    pilot.add_argument(
        "--template", type=_request_id, help="template with a sandbox block (default: first one)"
    )
    pilot.add_argument(
        "--cap-wait", type=int, default=90, help="seconds to wait for a cap change to apply (caches ≤ 60 s)"
    )


def _add_usage_and_mcp(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], late: argparse.ArgumentParser
) -> None:
    """`usage` and `mcp`."""
    usage = commands.add_parser(
        "usage",
        help="a tenant's calls, sessions, time and estimated cost, from the audit table",
        parents=[late],
    )
    usage.add_argument("--tenant", type=_tenant_id, required=True)
    usage.add_argument("--since", type=_iso_time, help="inclusive, ISO-8601 UTC (default: every row kept)")
    usage.add_argument("--until", type=_iso_time, help="exclusive, ISO-8601 UTC (default: now)")
    usage.add_argument(
        "--by", choices=tuple(n.USAGE_GROUPINGS), help="one line per UTC day, agent or template"
    )
    usage.add_argument("--csv", metavar="PATH", help="also write the report as CSV to PATH")
    mcp = commands.add_parser(
        "mcp", help="serve the sandbox as an MCP server over stdio (one turn per MCP session)", parents=[late]
    )
    mcp.add_argument("--tenant", type=_tenant_id, required=True)
    mcp.add_argument("--agent", type=_request_id, required=True)
    mcp.add_argument("--template", type=_request_id, required=True)
    mcp.add_argument("--turn", type=_request_id, help="turn id (default: a fresh one per MCP session)")
    mcp.add_argument("--user", type=_request_id, help="user_id recorded in the audit rows")


def _resolve_mode(args: argparse.Namespace) -> None:
    if args.local is None:
        args.local = os.environ.get("SANDBOX_LOCAL") == "1"
    if args.stage is None:
        # The local stack runs the `local` stage unless told otherwise.
        args.stage = "local" if (args.local or args.command == "local") else DEFAULT_STAGE


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on bad usage
    _resolve_mode(args)
    try:
        from infra.sandboxctl import commands

        return commands.run(args)
    except CtlError as exc:
        print(f"sandboxctl: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("sandboxctl: interrupted", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:  # noqa: BLE001 - the contract is one line, never a traceback
        reason = " ".join(str(exc).split()) or type(exc).__name__
        print(f"sandboxctl: {type(exc).__name__}: {reason}", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
