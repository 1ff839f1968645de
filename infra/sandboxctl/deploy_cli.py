"""Command-line shape of what acts on a stage's deployment rather than on a running stack:
`sandboxctl tenant add|remove` (edit the stage's tenants file) and `sandboxctl doctor` (is the
account and region ready for the stage). Neither needs a stack, so both run before a target is
resolved. Kept beside main.py so the parser stays cheap to import."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sandbox_common import naming as n

from infra.sandboxctl.errors import EXIT_FAILURE, EXIT_OK


def add_tenant_commands(tenant_cmd: Any, late: argparse.ArgumentParser, *, tenant_id: Any) -> None:
    add = tenant_cmd.add_parser(
        "add",
        help="add a tenant to the stage's tenants file (prints the deploy that applies it)",
        parents=[late],
    )
    add.add_argument("tenant", type=tenant_id)
    add.add_argument(
        "--environment",
        action="append",
        choices=n.ENVIRONMENTS,
        help=f"an environment of the tenant (repeatable; default {n.ENVIRONMENTS[0]})",
    )
    add.add_argument(
        "--template",
        action="append",
        default=[],
        metavar="NAME=ENV",
        help="a template and the environment of its sandbox block (ENV `none`: no block); repeatable",
    )
    add.add_argument("--tier", choices=n.COMPLIANCE_TIERS, default="standard")
    add.add_argument("--data-read", action="append", default=[], metavar="S3_PREFIX")
    add.add_argument("--data-write", action="append", default=[], metavar="S3_PREFIX")
    add.add_argument("--kms-key", action="append", default=[], metavar="KEY_ARN")
    add.add_argument("--tenants-file", help="edit this file instead of the stage's own")
    remove = tenant_cmd.add_parser(
        "remove",
        help="remove a tenant from the stage's tenants file (prints the deploy that applies it)",
        parents=[late],
    )
    remove.add_argument("tenant", type=tenant_id)
    remove.add_argument("--tenants-file", help="edit this file instead of the stage's own")


def add_doctor(commands: Any, late: argparse.ArgumentParser) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="check an account and region can take the stage: AgentCore, CDK bootstrap, quotas",
        parents=[late],
    )
    doctor.add_argument("--region", help="region to check (default: the stage's, else boto3's)")


def handles(args: argparse.Namespace) -> bool:
    return args.command == "doctor" or (args.command == "tenant" and args.tenant_command in ("add", "remove"))


def run(args: argparse.Namespace) -> int:
    from infra.sandboxctl import render

    if args.command == "doctor":
        from infra.sandboxctl import doctor

        report = doctor.run(args.stage, region=args.region)
        print(render.to_json(report.as_dict()) if args.json else report.human())
        if not report.ok:
            print(f"sandboxctl: doctor: failed: {', '.join(report.failed)}", file=sys.stderr)
        return EXIT_OK if report.ok else EXIT_FAILURE
    from infra.sandboxctl import tenants_file

    if args.tenant_command == "add":
        entry = tenants_file.tenant_entry(
            args.tenant,
            environments=args.environment or [n.ENVIRONMENTS[0]],
            templates=_templates(args.template),
            tier=args.tier,
            data_read=args.data_read,
            data_write=args.data_write,
            kms_keys=args.kms_key,
        )
        change = tenants_file.add(args.stage, entry, file=args.tenants_file)
    else:
        change = tenants_file.remove(args.stage, args.tenant, file=args.tenants_file)
    print(render.to_json(change.as_dict()) if args.json else change.human())
    return EXIT_OK


def _templates(pairs: list[str]) -> dict[str, str | None]:
    from infra.sandboxctl.errors import CtlError

    templates: dict[str, str | None] = {}
    for pair in pairs:
        name, sep, env = pair.partition("=")
        if not sep or not name:
            raise CtlError(
                f"--template {pair!r}: expected NAME=ENV (ENV one of {', '.join(n.ENVIRONMENTS)} or none)"
            )
        templates[name] = None if env == "none" else env
    return templates
