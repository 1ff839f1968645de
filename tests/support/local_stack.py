"""The local stack as a user runs it: `sandboxctl local up` in a state directory of its own, the
environment a shell would have (no AWS_* or SANDBOX_* variables of the test run), and
`sandboxctl local down` at the end, which must leave no process of the stack behind.

One builder for every suite that drives the CLI, the MCP server or an agent against a running
stack (module-scoped fixtures: `with running_stack(tmp_path_factory.mktemp("x")) as env: yield env`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from infra.local import stack
from infra.local.state import LocalState, pid_alive, read_state
from tests.support import ctl_server

SANDBOXCTL = str(Path(sys.executable).with_name("sandboxctl"))


def ctl(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`sandboxctl ARGS` in `env`, a process of its own forked from a server that has imported the
    CLI (`tests/support/ctl_server.py`)."""
    return ctl_server.run([SANDBOXCTL, *args], env, timeout)


def ctl_process(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`sandboxctl ARGS` in `env` as a new process of the installed console script: for what only a
    fresh process shows (its start-up, the modules it loads)."""
    return subprocess.run([SANDBOXCTL, *args], env=env, capture_output=True, text=True, timeout=timeout)


def ctl_json(env: dict[str, str], *args: str) -> Any:
    """`sandboxctl --json ARGS`, which must succeed; its parsed output."""
    out = ctl(env, "--json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def assert_one_line_failure(out: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    """`out` failed with exit `code`, no traceback, one line on stderr for a refusal (exit 1),
    naming each of `needles`."""
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    if code == 1:
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    for needle in needles:
        assert needle in out.stderr, out.stderr


def state_of(env: dict[str, str]) -> LocalState:
    """The running stack's state (endpoints, resources, clients) of `env`'s state directory."""
    state = read_state(Path(env["SANDBOX_LOCAL_DIR"]))
    assert state is not None
    return state


@contextmanager
def running_stack(directory: Path, **env_extra: str) -> Iterator[dict[str, str]]:
    """A started local stack; yields the environment that reaches it (`SANDBOX_LOCAL=1`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SANDBOX_"))}
    env.update(SANDBOX_LOCAL_DIR=str(directory), SANDBOX_LOCAL="1", **env_extra)
    up = ctl(env, "--json", "local", "up")
    assert up.returncode == 0, up.stderr
    pids = list(json.loads(up.stdout)["pids"].values())
    try:
        yield env
    finally:
        # every process the stack started: the components, their Lambda workers and interpreter
        # sessions, also those outside the process groups
        tree = {d for pid in pids for d in stack.descendants(pid)} | set(pids)
        down = ctl(env, "--json", "local", "down", timeout=60)
    assert down.returncode == 0, down.stderr
    assert sorted(s["pid"] for s in json.loads(down.stdout)["stopped"]) == sorted(pids)
    assert [p for p in tree if pid_alive(p)] == []
    assert ctl_json(env, "local", "status")["running"] is False
