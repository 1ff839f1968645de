"""`python -m infra.local.interpreter --port N [--registry FILE]`

Prints one JSON line `{"endpoint": "http://127.0.0.1:N", ...}` once it accepts requests, then
serves until SIGTERM/SIGINT, and kills every session's process on the way out.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from sandbox_common import naming

from infra.local.interpreter import Limits, LocalInterpreterServer
from infra.local.interpreter.disk import KINDS
from infra.local.interpreter.egress import EgressProxy
from infra.local.interpreter.isolation import STRATEGIES, IsolationUnavailable
from infra.local.interpreter.s3relay import grants_from_json


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m infra.local.interpreter", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free port)")
    parser.add_argument(
        "--registry", help='JSON file {"<interpreter id>": "PUBLIC"|"SANDBOX"|"VPC"}, re-read on change'
    )
    parser.add_argument(
        "--interpreter",
        action="append",
        default=[],
        metavar="ID=MODE",
        help="register an interpreter (repeatable), e.g. sbx_local_acme_pub=PUBLIC",
    )
    parser.add_argument(
        "--data-grants",
        metavar="FILE",
        help='JSON {"<interpreter id>": {"endpoint", "region", "statements"}}: what its sessions may read'
        " of the emulated S3 (the tenant role's statements)",
    )
    parser.add_argument(
        "--egress-proxy",
        metavar="HOST:PORT",
        help="the egress proxy on this host's loopback: the one thing VPC sessions can reach (egress.py)",
    )
    parser.add_argument(
        "--egress-ca-cert",
        metavar="PATH",
        help="the egress proxy's CA certificate (PEM, no key), shown read-only to VPC sessions",
    )
    parser.add_argument(
        "--isolation",
        choices=STRATEGIES,
        default="auto",
        help=f"auto: bubblewrap, else refuse every session (unless {naming.ENV_LOCAL_UNISOLATED}=1)",
    )
    parser.add_argument(
        "--python",
        default=os.environ.get(naming.ENV_SESSION_PYTHON) or None,
        help=(
            f"the Python that runs session code (default ${naming.ENV_SESSION_PYTHON}, "
            "else this interpreter's base Python)"
        ),
    )
    parser.add_argument(
        "--disk",
        choices=("auto", *KINDS),
        default="auto",
        help="the session disk's kind (auto: ext4 if it works)",
    )
    parser.add_argument("--disk-mb", type=int, default=Limits.disk_mb, help="each session's disk, in MiB")
    parser.add_argument(
        "--disk-files", type=int, default=Limits.disk_files, help="files on each session's disk"
    )
    parser.add_argument("--memory-mb", type=int, default=Limits.memory_mb)
    parser.add_argument("--cpu-seconds", type=int, default=Limits.cpu_seconds)
    parser.add_argument("--max-processes", type=int, default=Limits.max_processes)
    parser.add_argument("--max-sessions", type=int, default=64)
    parser.add_argument("--log-level", default="WARNING")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    opts = parser.parse_args(argv)
    logging.basicConfig(level=opts.log_level.upper(), stream=sys.stderr)

    interpreters: dict[str, str] = {}
    for item in opts.interpreter:
        interpreter_id, sep, mode = item.partition("=")
        if not sep:
            parser.error(f"--interpreter expects ID=MODE, got {item!r}")
        interpreters[interpreter_id] = mode
    if bool(opts.egress_proxy) != bool(opts.egress_ca_cert):
        parser.error("--egress-proxy and --egress-ca-cert go together")
    try:
        egress_proxy = (
            EgressProxy.parse(opts.egress_proxy, opts.egress_ca_cert) if opts.egress_proxy else None
        )
    except ValueError as exc:
        print(f"local interpreter: {exc}", file=sys.stderr)
        return 1
    try:
        grants = (
            grants_from_json(Path(opts.data_grants).read_text(encoding="utf-8")) if opts.data_grants else {}
        )
    except (OSError, ValueError) as exc:
        print(f"local interpreter: {exc}", file=sys.stderr)
        return 1
    try:
        server = LocalInterpreterServer(
            opts.port,
            interpreters=interpreters,
            registry_file=opts.registry,
            isolation=opts.isolation,
            limits=Limits(
                memory_mb=opts.memory_mb,
                cpu_seconds=opts.cpu_seconds,
                max_processes=opts.max_processes,
                disk_mb=opts.disk_mb,
                disk_files=opts.disk_files,
            ),
            disk_kind=opts.disk,
            max_sessions=opts.max_sessions,
            python=opts.python,
            data_grants=grants,
            egress_proxy=egress_proxy,
        ).start()
    except (OSError, ValueError, IsolationUnavailable) as exc:
        print(f"local interpreter: {exc}", file=sys.stderr)
        return 1
    _serve(server)
    return 0


def _serve(server: LocalInterpreterServer) -> None:
    """Say where the server is (and how isolated its sessions are), then serve until a signal."""
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    plan = server.manager.plan
    if plan.strategy != "bwrap":  # say it where the operator looks: the log, at start
        print(
            "local interpreter: WARNING: sessions are"
            f" {'refused' if plan.strategy == 'unavailable' else 'UNISOLATED'}: {plan.unavailable}",
            file=sys.stderr,
            flush=True,
        )
    print(
        json.dumps({"endpoint": server.endpoint, "pid": os.getpid(), "isolation": server.isolation}),
        flush=True,
    )
    try:
        done.wait()
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
