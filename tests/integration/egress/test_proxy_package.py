"""The egress proxy as its container ships it: its package and `sandbox_common` alone on the path,
under the proxy's own virtual environment (`.venv-egress`), nothing else of the project."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from infra.local.egress import egress_python
from infra.local.state import REPO_ROOT

PYTHON = egress_python()
pytestmark = pytest.mark.skipif(PYTHON is None, reason="needs .venv-egress (make egress-runtime)")


def test_proxy_imports_with_only_its_package_and_common(tmp_path: Path) -> None:
    # Given a directory holding only what the proxy's image copies
    shutil.copytree(REPO_ROOT / "functions" / "egress_proxy", tmp_path / "egress_proxy")
    shutil.copytree(
        REPO_ROOT / "layers" / "common" / "python" / "sandbox_common", tmp_path / "sandbox_common"
    )
    # When the proxy's modules are imported from there, in the proxy's own venv
    probe = (
        "import sys, egress_proxy.__main__, egress_proxy.addon, egress_proxy.ca;"
        "print(sorted({m.split('.')[0] for m in sys.modules}))"
    )
    done = subprocess.run(
        [str(PYTHON), "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); {probe}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    # Then they import, and nothing of the project but those two packages is loaded
    assert done.returncode == 0, done.stderr
    loaded = set(eval(done.stdout))  # noqa: S307 - our own probe's printed list
    ours = {"egress_proxy", "sandbox_common", "sandbox_session", "sandbox_runtime", "dispatch", "infra"}
    assert loaded & ours == {"egress_proxy", "sandbox_common"}
    assert "mitmproxy" in loaded


def test_proxy_command_line_refuses_bad_settings_naming_them(tmp_path: Path) -> None:
    base = [
        str(PYTHON),
        "-m",
        "egress_proxy",
        "--stage",
        "s",
        "--confdir",
        str(tmp_path / "ca"),
        "--egress-table",
        "e",
        "--counters-table",
        "c",
        "--tenants-table",
        "t",
    ]
    env = {
        "PYTHONPATH": f"{REPO_ROOT / 'functions'}:{REPO_ROOT / 'layers/common/python'}",
        "PATH": "/usr/bin:/bin",
    }
    for extra, needle in (
        (["--routes", "api.example.com=10.0.0.1:443"], "loopback"),
        (["--index-url", "http://packages.example.com/simple/"], "--index-url"),
        (["--cache-seconds", "90"], "--cache-seconds"),
    ):
        done = subprocess.run([*base, *extra], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 2 and needle in done.stderr, (extra, done.stderr)
