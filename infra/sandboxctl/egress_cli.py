"""Command-line shape and rendering of `sandboxctl egress …` and `sandboxctl secrets …`
(docs/egress.md). Kept beside main.py so the parser stays cheap to import."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sandbox_common import naming as n

from infra.sandboxctl import render
from infra.sandboxctl.errors import EXIT_OK


def _secret_name(text: str) -> str:
    if not n.SECRET_NAME_RE.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a secret name ({n.SECRET_NAME_RE.pattern})")
    return text


def add_commands(commands: Any, late: argparse.ArgumentParser, *, tenant_id: Any, request_id: Any) -> None:
    egress = commands.add_parser(
        "egress", help="what allowlist sessions may reach (the egress proxy's policy)"
    )
    egress_cmd = egress.add_subparsers(dest="egress_command", metavar="ACTION", required=True)
    get = egress_cmd.add_parser("get", help="a tenant × environment's egress policy", parents=[late])
    get.add_argument("--tenant", type=tenant_id, required=True)
    get.add_argument("--environment", choices=n.ENVIRONMENTS, required=True)
    put = egress_cmd.add_parser(
        "set", help="replace a tenant × environment's egress policy (applies within 60 s)", parents=[late]
    )
    put.add_argument("--tenant", type=tenant_id, required=True)
    put.add_argument("--environment", choices=n.ENVIRONMENTS, required=True)
    put.add_argument(
        "--allow",
        nargs="+",
        action="extend",
        default=[],
        metavar="HOST[:PORT]",
        help="an allowed host or *.suffix (port 443 unless given); repeatable",
    )
    put.add_argument(
        "--credential",
        nargs="+",
        action="extend",
        default=[],
        metavar="HOST=HEADER:TEMPLATE",
        help="a header the proxy adds to HTTPS requests to an allowed host, e.g."
        " 'api.example.com=Authorization:Bearer {secret:crm-token}'",
    )
    put.add_argument(
        "--packages",
        nargs="+",
        action="extend",
        default=[],
        metavar="NAME[==VERSION]",
        help="packages pip may install through the stage's index",
    )
    put.add_argument("--none", action="store_true", help="close the environment's egress: nothing allowed")
    show = egress_cmd.add_parser(
        "show", help="a live session's connections through the proxy", parents=[late]
    )
    show.add_argument("--session", type=request_id, required=True)

    secrets = commands.add_parser("secrets", help="a tenant's secrets (egress credentials read them)")
    secrets_cmd = secrets.add_subparsers(dest="secrets_command", metavar="ACTION", required=True)
    secret_put = secrets_cmd.add_parser(
        "put", help="store a tenant secret; its value is read from standard input", parents=[late]
    )
    secret_put.add_argument("--tenant", type=tenant_id, required=True)
    secret_put.add_argument("name", type=_secret_name)
    secret_list = secrets_cmd.add_parser(
        "list", help="a tenant's secret names (never values)", parents=[late]
    )
    secret_list.add_argument("--tenant", type=tenant_id, required=True)


def _policy_text(policy: dict[str, Any]) -> str:
    lines = [f"egress: {policy['egress']}"]
    for rule in policy["allow"]:
        ports = ",".join(str(p) for p in rule["ports"])
        line = f"allow: {rule['host']} ports {ports}"
        if "credential" in rule:
            line += f" credential {rule['credential']['header']}: {rule['credential']['template']}"
        lines.append(line)
    lines.append("packages: " + (", ".join(policy["packages"]) or "none"))
    return "\n".join(lines)


def run_egress(args: argparse.Namespace, target: Any) -> int:
    from infra.sandboxctl import egress_ops

    if args.egress_command == "get":
        data: Any = egress_ops.egress_get(target, args.tenant, args.environment)
        if args.json:
            print(render.to_json({k: data[k] for k in ("egress", "allow", "packages")}))
        else:
            stored = "" if data["stored"] else " (none stored: nothing is allowed)"
            print(f"{data['parameter']}{stored}\n{_policy_text(data)}")
        return EXIT_OK
    if args.egress_command == "set":
        data = egress_ops.egress_set(
            target,
            args.tenant,
            args.environment,
            allow=args.allow,
            credentials=args.credential,
            packages=args.packages,
            closed=args.none,
        )
        text = (
            f"{data['parameter']} replaced; the egress proxy applies it within"
            f" {data['applies_within_seconds']} s\n{_policy_text(data['policy'])}"
        )
        print(render.to_json(data) if args.json else text)
        return EXIT_OK
    data = egress_ops.egress_show(target, args.session)
    if args.json:
        print(render.to_json(data))
        return EXIT_OK
    head = render.pairs(
        {
            "session": data["session_id"],
            "tenant": data["tenant_id"],
            "environment": data["environment"],
            "source": data["source"] or "not bound",
            "live": data["live"],
            **data["counters"],
            "denied_hosts": ", ".join(data["denied_hosts"]) or "-",
        }
    )
    print(f"{head}\n\n{render.table(data['connections'], list(egress_ops.CONNECTION_COLUMNS))}")
    return EXIT_OK


def run_secrets(args: argparse.Namespace, target: Any) -> int:
    from infra.sandboxctl import egress_ops

    if args.secrets_command == "put":
        data: Any = egress_ops.secrets_put(target, args.tenant, args.name, sys.stdin.read())
        text = f"{data['secret']} {'created' if data['created'] else 'replaced'} (the value is not shown)"
    else:
        data = egress_ops.secrets_list(target, args.tenant)
        text = "\n".join(data["secrets"]) or f"tenant {data['tenant_id']} has no secrets"
    print(render.to_json(data) if args.json else text)
    return EXIT_OK
