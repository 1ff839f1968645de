"""The local stack's egress: the egress proxy as one more process of the stack, its CA, the test
routes, and the local package index it routes the stage's index host to.

At `local up`, before any process starts:
- the proxy's CA is made in `<state>/egress/` (mode 0700, the key never leaves it) the way the
  proxy's engine makes it; its certificate alone is copied to `<state>/egress-ca-cert.pem`, the
  file sessions trust and the interpreter is given (`--egress-ca-cert`);
- the local index's wheels are made under `<state>/package-index/`, with a server certificate for
  `naming.LOCAL_PACKAGE_INDEX_HOST` signed by a CA of the stack's own (`<state>/index-ca/`);
- SANDBOX_EGRESS_TEST_ROUTES (`name=127.0.0.1:PORT,...`) and SANDBOX_EGRESS_TEST_CA (PEM) are
  read: a route sends an allowed name to a loopback server, verified against that CA (and the
  stack's own CA for the index). Without a route, loopback and private addresses are refused.

The proxy runs from `.venv-egress` (`make egress-runtime`, Python >= 3.12); without it the stack
starts without a proxy, and sessions of an `allowlist` environment cannot start (`local status`
says so).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox_common import naming as n

from infra.local import certs, package_index
from infra.local.state import REPO_ROOT, LocalStackError

EGRESS_DIR = "egress"
CA_CERT_FILE = "egress-ca-cert.pem"
INDEX_DIR = "package-index"
INDEX_CA_DIR = "index-ca"
ROUTE_CA_FILE = "egress-route-ca.pem"
_CA_TIMEOUT = 60


def egress_python() -> Path | None:
    python = REPO_ROOT / n.EGRESS_VENV_DIR / "bin" / "python"
    return python if python.exists() else None


def python_path() -> str:
    """What the proxy imports: its package and the common layer, as the Lambdas see them."""
    return os.pathsep.join(str(REPO_ROOT / p) for p in ("functions", "layers/common/python"))


@dataclass(frozen=True)
class TestRoutes:
    routes: str  # as the proxy's --routes takes them ("" = none)
    ca_pem: str  # "" = none
    resolve: str = ""  # as the proxy's --resolve takes them ("" = none)


def read_test_routes(environ: dict[str, str] | os._Environ[str] = os.environ) -> TestRoutes:
    """SANDBOX_EGRESS_TEST_ROUTES / SANDBOX_EGRESS_TEST_CA, checked here so `local up` says what is
    wrong instead of a proxy that fails to start."""
    routes = environ.get(n.ENV_EGRESS_TEST_ROUTES, "").strip()
    ca_path = environ.get(n.ENV_EGRESS_TEST_CA, "").strip()
    for entry in filter(None, (e.strip() for e in routes.split(","))):
        name, sep, target = entry.partition("=")
        address, colon, port = target.rpartition(":")
        if not sep or not name or not colon or not port.isdigit() or not address.startswith("127."):
            raise LocalStackError(
                f"{n.ENV_EGRESS_TEST_ROUTES}: {entry!r} is not name=127.0.0.1:PORT"
                " (routes lead to loopback only)"
            )
        if name == n.LOCAL_PACKAGE_INDEX_HOST or name == n.EGRESS_PSEUDO_HOST:
            raise LocalStackError(f"{n.ENV_EGRESS_TEST_ROUTES}: {name} is the stack's own name")
    ca_pem = ""
    if ca_path:
        try:
            ca_pem = Path(ca_path).read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            raise LocalStackError(f"{n.ENV_EGRESS_TEST_CA}: cannot read {ca_path}: {exc}") from None
        if "BEGIN CERTIFICATE" not in ca_pem or "PRIVATE KEY" in ca_pem:
            raise LocalStackError(f"{n.ENV_EGRESS_TEST_CA}: {ca_path} is not a certificate-only PEM file")
    resolve = environ.get(n.ENV_EGRESS_TEST_RESOLVE, "").strip()
    for entry in filter(None, (e.strip() for e in resolve.split(","))):
        name, sep, address = entry.partition("=")
        if not sep or not name or not address:
            raise LocalStackError(f"{n.ENV_EGRESS_TEST_RESOLVE}: {entry!r} is not name=ADDRESS")
    return TestRoutes(routes, ca_pem, resolve)


@dataclass(frozen=True)
class EgressPlan:
    """Everything the stack needs to start the proxy and the index, made before either starts."""

    python: Path
    proxy_port: int
    index_port: int
    confdir: Path
    ca_cert: Path
    index_dir: Path
    index_cert: Path
    index_key: Path
    route_ca: Path
    routes: str
    resolve: str = ""

    @property
    def proxy_address(self) -> str:
        return f"127.0.0.1:{self.proxy_port}"

    def state(self) -> dict[str, Any]:
        """What the state file records (and `local status` shows)."""
        return {
            "proxy": self.proxy_address,
            "ca_cert": str(self.ca_cert),
            "index_url": n.LOCAL_PACKAGE_INDEX_URL,
            "routes": self.routes,
        }


def prepare(directory: Path, *, proxy_port: int, index_port: int, test: TestRoutes) -> EgressPlan | None:
    """Make the CA, the index's wheels and certificate, and the route trust; None when the proxy's
    venv is missing (the stack then runs without egress)."""
    python = egress_python()
    if python is None:
        return None
    confdir = directory / EGRESS_DIR
    try:
        subprocess.run(
            [str(python), "-m", "egress_proxy.ca", "--confdir", str(confdir)],
            check=True,
            capture_output=True,
            timeout=_CA_TIMEOUT,
            env={**_env_base(), "PYTHONPATH": python_path()},
            cwd=str(REPO_ROOT),
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        raise LocalStackError(
            f"the egress proxy's CA could not be made: {exc} {detail.decode(errors='replace')[-300:]}"
        ) from None
    ca_cert = directory / CA_CERT_FILE
    shutil.copyfile(confdir / "mitmproxy-ca-cert.pem", ca_cert)
    os.chmod(ca_cert, 0o644)

    index_dir = directory / INDEX_DIR
    package_index.build(index_dir)
    index_ca_dir = directory / INDEX_CA_DIR
    index_ca_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(index_ca_dir, 0o700)
    index_ca = certs.make_ca("sandbox local package index CA")
    leaf = certs.make_leaf(index_ca, [n.LOCAL_PACKAGE_INDEX_HOST, "127.0.0.1"])
    index_cert, index_key = index_ca_dir / "index-cert.pem", index_ca_dir / "index-key.pem"
    index_key.touch(mode=0o600, exist_ok=True)
    index_key.write_bytes(leaf.key_pem)
    index_cert.write_bytes(leaf.cert_pem)
    route_ca = directory / ROUTE_CA_FILE
    route_ca.write_text(index_ca.cert_pem.decode("ascii") + test.ca_pem, encoding="ascii")

    routes = ",".join(filter(None, [f"{n.LOCAL_PACKAGE_INDEX_HOST}=127.0.0.1:{index_port}", test.routes]))
    return EgressPlan(
        python=python,
        proxy_port=proxy_port,
        index_port=index_port,
        confdir=confdir,
        ca_cert=ca_cert,
        index_dir=index_dir,
        index_cert=index_cert,
        index_key=index_key,
        route_ca=route_ca,
        routes=routes,
        resolve=test.resolve,
    )


def proxy_argv(plan: EgressPlan, stage: str, tables: dict[str, str]) -> list[str]:
    """The proxy's command line: the same module and options as the stage's container."""
    return [
        str(plan.python),
        "-m",
        n.EGRESS_PROXY_PACKAGE,
        "--stage",
        stage,
        "--port",
        str(plan.proxy_port),
        "--confdir",
        str(plan.confdir),
        "--egress-table",
        tables[n.EGRESS.logical],
        "--counters-table",
        tables[n.TENANT_DAILY_COUNTERS.logical],
        "--tenants-table",
        tables[n.TENANTS.logical],
        "--routes",
        plan.routes,
        "--route-ca",
        str(plan.route_ca),
        "--index-url",
        n.LOCAL_PACKAGE_INDEX_URL,
        *(["--resolve", plan.resolve] if plan.resolve else []),
    ]


def proxy_env(base: dict[str, str], moto_endpoint: str) -> dict[str, str]:
    return {**base, "AWS_ENDPOINT_URL": moto_endpoint, "PYTHONPATH": python_path()}


def index_argv(plan: EgressPlan, python: str) -> list[str]:
    return [
        python,
        "-m",
        "infra.local.package_index",
        "--port",
        str(plan.index_port),
        "--dir",
        str(plan.index_dir),
        "--cert",
        str(plan.index_cert),
        "--key",
        str(plan.index_key),
    ]


def _env_base() -> dict[str, str]:
    return {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
