"""`make client-layer` (`python -m infra.cdk.client_layer [--output ZIP]`): the agent client as a
Lambda layer zip for agent runtimes on Lambda, built without Docker.

The layer holds `python/sandbox_client` and its dist-info, nothing else: the client is pure
Python and its one dependency, boto3, is the one the Lambda Python runtimes include (any boto3 of
the client's declared range serves it). pip installs the client from layers/client into a scratch
directory (`--no-deps --no-compile`: no third-party code, no bytecode of the build host's Python);
the zip is deterministic (sorted entries, fixed timestamps and modes), so the same source gives
the same bytes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CLIENT_DIR = REPO_ROOT / "layers" / "client"
DEFAULT_OUTPUT = REPO_ROOT / ".build" / "sandbox-client-layer.zip"
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def _shipped(path: Path) -> bool:
    # No bytecode, and no direct_url.json (it names the build machine's checkout path).
    return "__pycache__" not in path.parts and path.suffix != ".pyc" and path.name != "direct_url.json"


def build_client_layer(output: Path = DEFAULT_OUTPUT, *, client_dir: Path = CLIENT_DIR) -> Path:
    """Build the layer zip at `output` (replaced if present); returns its path."""
    with tempfile.TemporaryDirectory(prefix="client-layer-") as scratch:
        root = Path(scratch)
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-compile",
                "--target",
                str(root / "python"),
                str(client_dir),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"client layer build failed (pip exit {result.returncode}): {result.stderr[-2000:]}"
            )
        files = sorted(p for p in root.rglob("*") if p.is_file() and _shipped(p))
        output.parent.mkdir(parents=True, exist_ok=True)
        partial = output.with_name(output.name + ".partial")
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                info = zipfile.ZipInfo(path.relative_to(root).as_posix(), date_time=_ZIP_TIME)
                info.external_attr = 0o644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, path.read_bytes())
        partial.replace(output)
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infra.cdk.client_layer", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=f"default: {DEFAULT_OUTPUT}")
    args = parser.parse_args(argv)
    print(build_client_layer(args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
