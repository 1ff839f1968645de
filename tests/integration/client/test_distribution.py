"""The agent client as an agent developer gets it: `pip install ./layers/client` into a fresh
virtual environment (boto3 is all it brings), or the Lambda layer zip `make client-layer` builds;
from either, a turn runs against the local stack (dispatch behind the Lambda emulator).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from sandbox_common import naming as n

from infra.cdk.client_layer import build_client_layer
from tests.support.stack import Stack

REPO = Path(__file__).resolve().parents[3]
# What `pip install ./layers/client` may bring: the client, boto3 and boto3's own dependencies.
BOTO3_AND_ITS_DEPENDENCIES = {
    "boto3",
    "botocore",
    "jmespath",
    "python-dateutil",
    "s3transfer",
    "six",
    "urllib3",
}

# One turn, as an agent runtime runs it: SandboxTurn builds its own boto3 client from the
# environment (region, credentials, AWS_ENDPOINT_URL_LAMBDA), as it would on Lambda.
TURN = """
import json, sys
import sandbox_client
from sandbox_client import SandboxTurn

turn = SandboxTurn(sys.argv[1], tenant_id="acme", agent_id="venv-agent", template_id="analyst")
began = turn.begin()
first = turn.execute_code("x = 6")  # ExecutionResult: the answer as sent is .raw
second = turn.execute_code("print(x * 7)")
ended = turn.end()
print(json.dumps({"client": sandbox_client.__file__, "tool": (turn.tool or {}).get("name"),
                  "first": first.raw, "second": second.raw, "ended": ended,
                  "typed": [type(first).__name__, second.stdout, second.exit_code],
                  "common": "sandbox_common" in sys.modules}))
"""


LAYER_ZIP = "sandbox-client-layer.zip"
LIST_DISTRIBUTIONS = (
    "import importlib.metadata as m, json; print(json.dumps([d.metadata['Name'] for d in m.distributions()]))"
)


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment with nothing installed but `pip install ./layers/client`.

    The venv is made without its own pip (creating one takes longer than the install itself);
    the project's pip installs into it (`pip --python`), pinned by constraints.txt like every
    install of the project."""
    root = tmp_path_factory.mktemp("client-venv") / "venv"
    venv.EnvBuilder(with_pip=False).create(root)
    python = root / "bin" / "python"
    env = {**os.environ, "PIP_NO_COMPILE": "1", "PIP_CONSTRAINT": str(REPO / "constraints.txt")}
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "./layers/client"],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return python


@pytest.fixture(scope="module")
def client_layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layer zip `make client-layer` builds, unpacked as Lambda unpacks a layer (under /opt)."""
    opt = tmp_path_factory.mktemp("layer-opt")
    archive = build_client_layer(opt.parent / LAYER_ZIP)
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(opt)
    return opt


def _turn_env(stack: Stack) -> dict[str, str]:
    """What an agent runtime on Lambda has (region, credentials), plus the local Lambda endpoint."""
    return {
        "PATH": os.environ["PATH"],
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ENDPOINT_URL_LAMBDA": stack.emulator.endpoint,
    }


def _run_turn(python: Path, stack: Stack, extra_env: dict[str, str] | None = None) -> dict[str, object]:
    out = subprocess.run(
        [str(python), "-c", TURN, stack.resources.functions[n.DISPATCH]],
        env={**_turn_env(stack), **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _assert_turn_ran(result: dict[str, object], stack: Stack) -> None:
    first, second = result["first"], result["second"]
    assert isinstance(first, dict) and isinstance(second, dict)
    assert result["tool"] == "execute_code" and first["ok"] is True
    assert result["typed"] == ["ExecutionResult", "42\n", 0]  # typed, from the installed client alone
    assert second["stdout"] == "42\n" and first["session_id"] == second["session_id"]
    assert result["ended"] == {"ok": True, "stopped": True}
    assert result["common"] is False
    # and dispatch counted and audited the two calls
    assert {r["invocation_id"] for r in stack.audit_rows("acme")} == {
        first["invocation_id"],
        second["invocation_id"],
    }


def test_client_installs_alone_with_boto3_only(fresh_venv: Path) -> None:
    # Given the fresh venv after `pip install ./layers/client` / When its distributions are listed
    listed = subprocess.run(
        [str(fresh_venv), "-c", LIST_DISTRIBUTIONS],
        cwd=fresh_venv.parent,
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    )
    names = {name.lower() for name in json.loads(listed.stdout)}
    # Then it holds the client and boto3 with boto3's own dependencies, nothing else
    assert names == {"sandbox-client"} | BOTO3_AND_ITS_DEPENDENCIES


def test_client_from_a_fresh_venv_runs_a_turn_against_the_local_stack(fresh_venv: Path, stack: Stack) -> None:
    # Given the local stack and a fresh venv that has only the client (and boto3)
    # When an agent runtime in that venv runs begin_turn, two execute_code calls and end_turn
    result = _run_turn(fresh_venv, stack)
    # Then the turn ran (state shared by the two calls, session stopped, two audit rows) with the
    # venv's own copy of the client, and nothing of the common layer was imported
    assert str(result["client"]).startswith(str(fresh_venv.parent.parent))
    _assert_turn_ran(result, stack)


def test_client_layer_holds_only_the_client(client_layer: Path) -> None:
    # Given the unpacked layer / Then it is the sandbox_client package and its metadata, no bytecode
    files = sorted(p.relative_to(client_layer).as_posix() for p in client_layer.rglob("*") if p.is_file())
    assert files and all(
        f.startswith(("python/sandbox_client/", "python/sandbox_client-0.1.0.dist-info/")) for f in files
    )
    assert "python/sandbox_client/turn.py" in files
    assert not [f for f in files if f.endswith(".pyc") or f.endswith("direct_url.json")]


def test_client_layer_is_deterministic(client_layer: Path, tmp_path: Path) -> None:
    # Given the layer built once (the fixture's) / When it is built again / Then the same bytes
    again = build_client_layer(tmp_path / "again.zip")
    assert again.read_bytes() == (client_layer.parent / LAYER_ZIP).read_bytes()


def test_client_from_the_layer_runs_a_turn_against_the_local_stack(
    fresh_venv: Path, client_layer: Path, stack: Stack
) -> None:
    # Given a runtime with a boto3 of its own and the layer on its path (as Lambda puts /opt/python)
    # When the turn runs there
    result = _run_turn(fresh_venv, stack, {"PYTHONPATH": str(client_layer / "python")})
    # Then the client imported is the layer's, and the turn ran
    assert str(result["client"]).startswith(str(client_layer / "python"))
    _assert_turn_ran(result, stack)
