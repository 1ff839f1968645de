"""Command-line shape and rendering of `sandboxctl warm …` and `sandboxctl sessions …`.
Kept beside main.py so the parser stays cheap to import."""

from __future__ import annotations

import argparse
from typing import Any

from sandbox_common import naming as n

from infra.sandboxctl import render
from infra.sandboxctl.errors import EXIT_OK


def add_commands(
    commands: Any, late: argparse.ArgumentParser, *, tenant_id: Any, non_negative: Any, request_id: Any
) -> None:
    warm = commands.add_parser("warm", help="warm session pools (started, readiness-checked sessions)")
    warm_cmd = warm.add_subparsers(dest="warm_command", metavar="ACTION", required=True)
    warm_set = warm_cmd.add_parser(
        "set", help="pool size of a tenant × environment (0 = none)", parents=[late]
    )
    warm_set.add_argument("tenant", type=tenant_id)
    warm_set.add_argument("size", type=non_negative, help="non-negative integer")
    warm_set.add_argument("--environment", choices=n.ENVIRONMENTS, default=n.ENVIRONMENTS[0])
    warm_show = warm_cmd.add_parser("show", help="desired sizes and warm sessions held", parents=[late])
    warm_show.add_argument("--tenant", type=tenant_id)

    sessions = commands.add_parser("sessions", help="live Code Interpreter sessions (the session ledger)")
    sessions_cmd = sessions.add_subparsers(dest="sessions_command", metavar="ACTION", required=True)
    listing = sessions_cmd.add_parser("list", help="sessions serving turns, oldest first", parents=[late])
    listing.add_argument("--tenant", type=tenant_id)
    listing.add_argument(
        "--all", action="store_true", help="also unclaimed warm sessions and starts in flight"
    )
    stop = sessions_cmd.add_parser("stop", help="stop a session and free its capacity", parents=[late])
    stop.add_argument("session_id", type=request_id)


def run_warm(args: argparse.Namespace, target: Any) -> int:
    from infra.sandboxctl import sessions_ops

    if args.warm_command == "set":
        data: Any = sessions_ops.warm_set(target, args.tenant, args.size, args.environment)
        text = (
            f"{data['parameter']} = {data['value']} (was {data['previous'] or 'unset'}); "
            f"refill: {data['refill']}"
        )
    else:
        data = sessions_ops.warm_rows(target, args.tenant)
        text = render.table(data, ["tenant", "environment", "warm_sessions", "warm", "starting"])
    print(render.to_json(data) if args.json else text)
    return EXIT_OK


def run_sessions(args: argparse.Namespace, target: Any) -> int:
    from infra.sandboxctl import sessions_ops

    if args.sessions_command == "list":
        data: Any = sessions_ops.sessions_list(target, tenant_id=args.tenant, include_all=args.all)
        text = render.table(data, list(sessions_ops.SESSION_COLUMNS))
    else:
        data = sessions_ops.sessions_stop(target, args.session_id)
        text = f"session {data['session_id']} stopped; capacity " + (
            "freed" if data["freed"] else "already free"
        )
    print(render.to_json(data) if args.json else text)
    return EXIT_OK
