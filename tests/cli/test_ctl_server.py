"""The suite's `sandboxctl` runner (`ctl`, tests/support/ctl_server.py) against the installed console
script as a new process (`ctl_process`): same exit status, stdout and stderr, and nothing of the
test process's or an earlier command's environment."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.local_stack import ctl, ctl_process


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SANDBOX_"))}
    return {**base, "SANDBOX_LOCAL_DIR": str(tmp_path / "no-stack"), **extra}


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("caps", "frob"),
        ("--help",),
        ("--local", "caps", "get", "--tenant", "acme"),
        ("--json", "local", "status"),
    ],
)
def test_ctl_answers_as_the_console_script_does(tmp_path: Path, args: tuple[str, ...]) -> None:
    # Given no running local stack
    env = _env(tmp_path)
    # When a command runs through the suite's runner and as a new process of the console script
    forked, fresh = ctl(env, *args), ctl_process(env, *args)
    # Then both end with the same status and print the same
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_ctl_command_sees_only_its_own_environment(tmp_path: Path) -> None:
    # Given one command run with SANDBOX_LOCAL=1, then another without it
    with_local = ctl(_env(tmp_path, SANDBOX_LOCAL="1"), "--json", "caps", "get", "--tenant", "acme")
    without = ctl(_env(tmp_path), "--json", "caps", "get", "--tenant", "acme")
    # Then the first looked for the local stack (its environment said so) and the second did not:
    # it went to AWS, with no SANDBOX_LOCAL left over from the first
    assert with_local.returncode == without.returncode == 1
    assert "local stack" in with_local.stderr
    assert "local stack" not in without.stderr


def test_ctl_runs_commands_of_several_threads_at_once(tmp_path: Path) -> None:
    # Given eight commands sent from eight threads at once, each with its own usage error
    env = _env(tmp_path)
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda i: ctl(env, "caps", f"frob{i}"), range(8)))
    # Then each got its own answer
    for i, out in enumerate(outs):
        assert out.returncode == 2 and f"frob{i}" in out.stderr
