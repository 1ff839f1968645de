"""Docker-free build of the third-party deps layer.

`pip install --platform manylinux2014_<arch> --only-binary=:all:` fetches the Lambda's wheels on
any host: the result never depends on the build machine's own Python or libc. The output is
cached under `.build/` keyed by the requirements and the target, so repeated synths reuse it, and
the CDK asset hash is that same key (deterministic: the same inputs give the same hash without
bundling anything, which is how the tests synthesize offline).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPS_DIR = REPO_ROOT / "layers" / "deps"
REQUIREMENTS = DEPS_DIR / "requirements.txt"
BUILD_CACHE = REPO_ROOT / ".build"
LAMBDA_PYTHON_VERSION = "3.13"  # must match the functions' runtime (python3.13)
PIP_PLATFORMS: dict[str, str] = {"arm64": "manylinux2014_aarch64", "x86_64": "manylinux2014_x86_64"}
_DONE_MARKER = ".complete"


def layer_hash(requirements: Path, architecture: str) -> str:
    """The cache key and the CDK asset hash: what was asked for, for which target."""
    digest = hashlib.sha256()
    digest.update(requirements.read_bytes())
    digest.update(f"\0{PIP_PLATFORMS[architecture]}\0cp{LAMBDA_PYTHON_VERSION}".encode())
    return digest.hexdigest()


def pip_command(
    requirements: Path, target: Path, architecture: str, extra_args: Sequence[str] = ()
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--quiet",
        "--requirement",
        str(requirements),
        "--target",
        str(target),
        "--platform",
        PIP_PLATFORMS[architecture],
        "--implementation",
        "cp",
        "--python-version",
        LAMBDA_PYTHON_VERSION,
        "--only-binary=:all:",
        # The build host's pip would write .pyc for ITS Python (3.11), useless to 3.13 and a
        # source of non-reproducible bytes.
        "--no-compile",
        *extra_args,
    ]


def build_layer(
    requirements: Path = REQUIREMENTS,
    *,
    architecture: str,
    cache_root: Path = BUILD_CACHE,
    extra_pip_args: Sequence[str] = (),
) -> Path:
    """Install the requirements into `<cache>/deps-<hash>/python` once; return the layer root."""
    key = layer_hash(requirements, architecture)
    layer_root = cache_root / f"deps-{key[:16]}"
    if (layer_root / _DONE_MARKER).exists():
        return layer_root
    cache_root.mkdir(parents=True, exist_ok=True)
    # Build beside the final place and rename, so an interrupted pip never leaves a half layer
    # that a later synth would take for a finished one.
    staging = Path(tempfile.mkdtemp(prefix="deps-build-", dir=cache_root))
    try:
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PIP_NO_INPUT": "1"}
        result = subprocess.run(
            pip_command(requirements, staging / "python", architecture, extra_pip_args),
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"deps layer build failed (pip exit {result.returncode}): {result.stderr.strip()[-2000:]}"
            )
        for cache in (staging / "python").rglob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)
        (staging / _DONE_MARKER).write_text(key)
        shutil.rmtree(layer_root, ignore_errors=True)
        staging.rename(layer_root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return layer_root


@jsii.implements(cdk.ILocalBundling)
class LocalPipBundling:
    """CDK local bundling: CDK calls this instead of Docker; returning True means 'done'."""

    def __init__(
        self,
        *,
        architecture: str,
        requirements: Path = REQUIREMENTS,
        cache_root: Path = BUILD_CACHE,
        extra_pip_args: Sequence[str] = (),
    ) -> None:
        self._architecture = architecture
        self._requirements = requirements
        self._cache_root = cache_root
        self._extra_pip_args = tuple(extra_pip_args)

    def try_bundle(self, output_dir: str, options: Any = None, **_: Any) -> bool:
        built = build_layer(
            self._requirements,
            architecture=self._architecture,
            cache_root=self._cache_root,
            extra_pip_args=self._extra_pip_args,
        )
        shutil.copytree(built / "python", Path(output_dir) / "python", dirs_exist_ok=True)
        return True


def deps_layer_code(architecture: str, **bundler_kwargs: Any) -> Any:
    """Lambda layer code for the deps layer. `image` is never pulled: local bundling always
    succeeds or raises, and there is no Docker on these machines anyway."""
    from aws_cdk import aws_lambda as lambda_

    requirements = bundler_kwargs.get("requirements", REQUIREMENTS)
    return lambda_.Code.from_asset(
        str(Path(requirements).parent),
        asset_hash_type=cdk.AssetHashType.CUSTOM,
        asset_hash=layer_hash(Path(requirements), architecture),
        bundling=cdk.BundlingOptions(
            image=cdk.DockerImage.from_registry("local-bundling-only"),
            local=LocalPipBundling(architecture=architecture, **bundler_kwargs),
        ),
    )
