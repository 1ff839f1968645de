"""The deps layer is built by pip for the Lambda platform, without Docker, cached and
deterministic; function and common-layer assets never carry bytecode caches."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from infra.cdk.layer_build import LAMBDA_PYTHON_VERSION, PIP_PLATFORMS, build_layer, layer_hash, pip_command


def _wheel(directory: Path, name: str = "tinypkg", version: str = "1.0") -> Path:
    """A real (tiny, pure) wheel, so pip runs for real but offline."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "VALUE = 42\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{f},,\n" for f in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for f, body in files.items():
            zf.writestr(f, body)
        zf.writestr(f"{info}/RECORD", record)
    return path


@pytest.fixture
def local_index(tmp_path: Path) -> tuple[Path, list[str]]:
    wheels = tmp_path / "wheels"
    _wheel(wheels)
    requirements = tmp_path / "req" / "requirements.txt"
    requirements.parent.mkdir()
    requirements.write_text("tinypkg==1.0\n")
    return requirements, ["--no-index", "--find-links", str(wheels)]


def test_pip_command_targets_the_lambda_platform_without_bytecode(tmp_path: Path) -> None:
    # Given an arm64 stage / When the pip command is built
    cmd = pip_command(tmp_path / "r.txt", tmp_path / "out", "arm64")
    # Then it fetches only cp313 manylinux aarch64 wheels and writes no .pyc
    joined = " ".join(cmd)
    assert f"--platform {PIP_PLATFORMS['arm64']}" in joined
    assert f"--python-version {LAMBDA_PYTHON_VERSION}" in joined
    assert "--implementation cp" in joined and "--only-binary=:all:" in cmd and "--no-compile" in cmd


def test_layer_hash_changes_with_requirements_and_architecture(tmp_path: Path) -> None:
    # Given a requirements file
    req = tmp_path / "requirements.txt"
    req.write_text("a==1\n")
    first = layer_hash(req, "arm64")
    # When nothing changes / the architecture changes / the requirements change
    same = layer_hash(req, "arm64")
    other_arch = layer_hash(req, "x86_64")
    req.write_text("a==2\n")
    other_req = layer_hash(req, "arm64")
    # Then the hash is stable and follows both inputs
    assert first == same
    assert len({first, other_arch, other_req}) == 3


def test_build_layer_installs_into_python_dir_and_reuses_the_cache(tmp_path: Path, local_index) -> None:
    requirements, pip_args = local_index
    cache = tmp_path / "cache"
    # Given an empty cache / When the layer is built with real pip
    root = build_layer(requirements, architecture="arm64", cache_root=cache, extra_pip_args=pip_args)
    # Then the package sits under python/ (the layer layout Lambda reads), without caches
    assert (root / "python" / "tinypkg" / "__init__.py").read_text() == "VALUE = 42\n"
    assert not list(root.rglob("__pycache__")) and not list(root.rglob("*.pyc"))
    # And a second build reuses it without pip (the wheel index is gone now)
    for wheel in Path(pip_args[-1]).iterdir():
        wheel.unlink()
    assert build_layer(requirements, architecture="arm64", cache_root=cache, extra_pip_args=pip_args) == root


def test_build_layer_pip_failure_raises_and_leaves_no_half_layer(tmp_path: Path, local_index) -> None:
    requirements, pip_args = local_index
    requirements.write_text("not-a-package-here==9.9\n")
    cache = tmp_path / "cache"
    # Given a requirement pip cannot satisfy / When building / Then a clear error, no cached layer
    with pytest.raises(RuntimeError, match="deps layer build failed"):
        build_layer(requirements, architecture="arm64", cache_root=cache, extra_pip_args=pip_args)
    assert list(cache.iterdir()) == []


def _synth_layer(
    outdir: Path, requirements: Path, pip_args: list[str], cache: Path, context: dict
) -> tuple[str, Path]:
    import aws_cdk as cdk
    from aws_cdk import aws_lambda as lambda_

    from infra.cdk.layer_build import deps_layer_code

    app = cdk.App(outdir=str(outdir), context=context)
    stack = cdk.Stack(app, "S")
    code = deps_layer_code("arm64", requirements=requirements, cache_root=cache, extra_pip_args=pip_args)
    lambda_.LayerVersion(stack, "Deps", code=code)
    assembly = app.synth()
    template = json.loads(Path(assembly.get_stack_by_name("S").template_full_path).read_text())
    (layer,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::LayerVersion"]
    return layer["Properties"]["Content"]["S3Key"], outdir


def test_deps_layer_code_bundles_locally_through_cdk(tmp_path: Path, local_index) -> None:
    from infra.cdk.app_factory import OFFLINE_CONTEXT

    requirements, pip_args = local_index
    # Given a stack with the deps layer and bundling enabled (no Docker on this machine)
    # When it is synthesized
    key, outdir = _synth_layer(tmp_path / "out", requirements, pip_args, tmp_path / "cache", {})
    # Then CDK staged our pip output
    staged = [p for p in outdir.glob("asset.*") if p.is_dir()]
    assert len(staged) == 1
    assert (staged[0] / "python" / "tinypkg" / "__init__.py").exists()
    # And the offline synth the tests use (no bundling, empty cache) yields the same asset hash
    offline_key, _ = _synth_layer(
        tmp_path / "out2", requirements, pip_args, tmp_path / "empty", OFFLINE_CONTEXT
    )
    assert offline_key == key
    assert not (tmp_path / "empty").exists()  # nothing was built offline


def test_function_code_ships_only_its_package_without_caches(tmp_path: Path) -> None:
    import aws_cdk as cdk
    from aws_cdk import aws_lambda as lambda_

    from infra.cdk.constructs.compute import function_code

    # Given a functions/ tree with bytecode caches and three packages
    root = tmp_path / "functions"
    for pkg in ("dispatch", "quota_check", "backstop"):
        (root / pkg / "__pycache__").mkdir(parents=True)
        (root / pkg / "handler.py").write_text("def handler(e, c):\n    return e\n")
        (root / pkg / "__pycache__" / "handler.cpython-313.pyc").write_bytes(b"\0")
        (root / pkg / "stray.pyc").write_bytes(b"\0")
    # When the dispatch code asset is staged by a real synth
    app = cdk.App(outdir=str(tmp_path / "out"))
    stack = cdk.Stack(app, "S")
    lambda_.Function(
        stack,
        "F",
        runtime=lambda_.Runtime.PYTHON_3_13,
        handler="dispatch.handler.handler",
        code=function_code("dispatch", root),
    )
    app.synth()
    (staged,) = [p for p in (tmp_path / "out").glob("asset.*") if p.is_dir()]
    shipped = sorted(str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file())
    # Then only dispatch's sources are in it
    assert shipped == ["dispatch/handler.py"]
