"""The two Lambda layers: third-party deps (pip, no Docker) and the project's common package."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.cdk.config import StageConfig
from infra.cdk.layer_build import LAMBDA_PYTHON_VERSION, REPO_ROOT, deps_layer_code

COMMON_LAYER_DIR = REPO_ROOT / "layers" / "common"
# Never ship bytecode or caches: they would change the asset hash from one machine to the next.
ASSET_EXCLUDES: tuple[str, ...] = ("**/__pycache__", "**/*.pyc", "**/.pytest_cache", "**/.mypy_cache")


def architecture(config: StageConfig) -> lambda_.Architecture:
    return lambda_.Architecture.ARM_64 if config.architecture == "arm64" else lambda_.Architecture.X86_64


def runtime() -> lambda_.Runtime:
    assert LAMBDA_PYTHON_VERSION == "3.13", "layer wheels and the runtime must agree"
    return lambda_.Runtime.PYTHON_3_13


class LayersConstruct(Construct):
    """Attributes: `deps` and `common` (LayerVersion), `all` (both, deps first)."""

    def __init__(
        self, scope: Construct, id_: str, *, config: StageConfig, common_dir: Path = COMMON_LAYER_DIR
    ) -> None:
        super().__init__(scope, id_)
        self._config = config
        self.deps = self._build_deps()
        self.common = self._build_common(common_dir)
        self.all = [self.deps, self.common]

    def _build_deps(self) -> lambda_.LayerVersion:
        return lambda_.LayerVersion(
            self,
            "Deps",
            code=deps_layer_code(self._config.architecture),
            compatible_runtimes=[runtime()],
            compatible_architectures=[architecture(self._config)],
            description="Third-party runtime deps (layers/deps/requirements.txt)",
        )

    def _build_common(self, common_dir: Path) -> lambda_.LayerVersion:
        return lambda_.LayerVersion(
            self,
            "Common",
            code=lambda_.Code.from_asset(str(common_dir), exclude=list(ASSET_EXCLUDES)),
            compatible_runtimes=[runtime()],
            compatible_architectures=[architecture(self._config)],
            description="Project code shared by the Lambdas (sandbox_common)",
        )
