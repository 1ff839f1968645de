"""The egress proxy's image asset: a build context of exactly the proxy package, sandbox_common and
the Dockerfile, so its hash (the image tag) changes when those change and only then, and the
Dockerfile copies nothing the context leaves out. Synthesizing it needs no Docker."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from infra.cdk.constructs.egress_proxy import (
    DOCKERFILE,
    IMAGE_CONTEXT_EXCLUDES,
    IMAGE_CONTEXT_INCLUDES,
    PROXY_PACKAGE,
)

REPO = Path(__file__).resolve().parents[2]


def _fingerprint(root: Path) -> str:
    import aws_cdk as cdk

    return cdk.FileSystem.fingerprint(
        str(root), exclude=list(IMAGE_CONTEXT_EXCLUDES), ignore_mode=cdk.IgnoreMode.DOCKER
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A repository-shaped tree: the included parts and neighbours that must not count."""
    for path, text in {
        f"{PROXY_PACKAGE}/__init__.py": "",
        f"{PROXY_PACKAGE}/addon.py": "x = 1\n",
        f"{PROXY_PACKAGE}/requirements.txt": "mitmproxy==12.0.0\n",
        "layers/common/python/sandbox_common/naming.py": "A = 1\n",
        DOCKERFILE: (REPO / DOCKERFILE).read_text(),
        "functions/dispatch/handler.py": "y = 1\n",
        "layers/common/python/sandbox_session/jobs.py": "z = 1\n",
        "infra/cdk/config.py": "c = 1\n",
        "README.md": "readme\n",
        ".venv/lib/site.py": "v = 1\n",
    }.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    "outside",
    [
        "functions/dispatch/handler.py",
        "layers/common/python/sandbox_session/jobs.py",
        "infra/cdk/config.py",
        "README.md",
        ".venv/lib/site.py",
        f"{PROXY_PACKAGE}/__pycache__/addon.cpython-313.pyc",
        "layers/common/python/sandbox_common/__pycache__/naming.cpython-311.pyc",
    ],
)
def test_image_hash_ignores_what_the_context_leaves_out(tree: Path, outside: str) -> None:
    # Given the context's hash / When a file outside it (or a bytecode cache) changes or appears
    before = _fingerprint(tree)
    (tree / outside).parent.mkdir(parents=True, exist_ok=True)
    (tree / outside).write_text("changed\n")
    # Then the image is the same (no rebuild, no new tag)
    assert _fingerprint(tree) == before


@pytest.mark.parametrize(
    "inside",
    [
        f"{PROXY_PACKAGE}/addon.py",
        f"{PROXY_PACKAGE}/requirements.txt",
        "layers/common/python/sandbox_common/naming.py",
        DOCKERFILE,
    ],
)
def test_image_hash_follows_the_proxy_its_pins_sandbox_common_and_the_dockerfile(
    tree: Path, inside: str
) -> None:
    # Given the context's hash / When a file of the context changes / Then the image hash does too
    before = _fingerprint(tree)
    (tree / inside).write_text((tree / inside).read_text() + "# changed\n")
    assert _fingerprint(tree) != before


def test_image_hash_is_the_same_for_the_same_tree(tree: Path, tmp_path_factory) -> None:
    # Given the tree copied elsewhere / Then the hash does not depend on where the checkout is
    copy = tmp_path_factory.mktemp("copy") / "repo"
    shutil.copytree(tree, copy)
    assert _fingerprint(copy) == _fingerprint(tree)


def test_dockerfile_copies_only_what_the_context_holds() -> None:
    # Given the Dockerfile's COPY sources
    sources = [
        src
        for line in (REPO / DOCKERFILE).read_text().splitlines()
        if line.startswith("COPY ")
        for src in line.split()[1:-1]
        if not src.startswith("--")
    ]
    assert sources  # the check below must run
    # Then each is inside one of the context's included paths
    for src in sources:
        assert any(src == inc or src.startswith(inc + "/") for inc in IMAGE_CONTEXT_INCLUDES), src
    # And the base image is pinned to a release, not a moving tag
    (base,) = re.findall(r"^FROM (\S+)", (REPO / DOCKERFILE).read_text(), re.M)
    assert re.search(r":\d+\.\d+\.\d+-", base), base


def test_proxy_command_is_what_the_proxy_parses() -> None:
    from egress_proxy.config import from_args
    from sandbox_common import naming as n

    from infra.cdk.config import build_config
    from infra.cdk.constructs.package_index import index_url
    from infra.cdk.function_env import PROXY_CONFDIR, proxy_command

    # Given the arguments the stage's task definition gives the proxy, with concrete values
    config = build_config("dev")
    tables = {spec.logical: spec.physical("dev") for spec in n.ALL_TABLES}
    url = index_url(n.package_index_domain("dev"), "123456789012", "us-east-1")
    args = proxy_command(
        config,
        tables=tables,
        port=8080,
        index_url=url,
        codeartifact_domain="thinkwork-dev",
        account="123456789012",
    )
    # When the proxy's own command line parses them (functions/egress_proxy/config.py)
    proxy = from_args(args)
    # Then it listens on the task's address and port, reads the CA from Secrets Manager into /tmp,
    # uses the stage's tables, and adds the CodeArtifact token to the index's requests
    assert (proxy.stage, proxy.listen_host, proxy.listen_port) == ("dev", "0.0.0.0", 8080)
    assert proxy.ca_from_secrets and proxy.confdir == PROXY_CONFDIR and PROXY_CONFDIR.startswith("/tmp/")
    assert (proxy.egress_table, proxy.counters_table, proxy.tenants_table) == (
        n.EGRESS.physical("dev"),
        n.TENANT_DAILY_COUNTERS.physical("dev"),
        n.TENANTS.physical("dev"),
    )
    assert proxy.index is not None
    assert proxy.index.host == "thinkwork-dev-123456789012.d.codeartifact.us-east-1.amazonaws.com"
    assert proxy.index.base_path == f"/pypi/{n.PACKAGE_INDEX_REPOSITORY}/simple/"
    assert proxy.index.codeartifact == ("thinkwork-dev", "123456789012")
    assert not proxy.routes and proxy.route_ca is None  # no local-stack shortcut on AWS
