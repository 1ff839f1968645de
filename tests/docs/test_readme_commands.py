"""Every command the README shows runs as shown, against a real local stack.

- Every fenced block of README.md is either run here, or tested by the MCP test below (the host
  configuration), or a diagram, or preceded by `<!-- not-run: REASON -->` saying why not.
- Each ```bash block runs twice in a row (README order: `local up` first, `local down` last), as
  `bash -e` from the checkout with a shell's environment (no AWS_* or SANDBOX_* variables of the
  test run), and must exit 0 and print what the README says it prints. The blocks make their own
  fresh ids, so the second run is a new turn, not a replay.
- The MCP host configuration is read from the README as is, written into a host's config file,
  and started exactly as that file says (command, args, env), with only its documented
  placeholder replaced; the official MCP client lists its tools.

The stack's state directory is `<checkout>/.local` of a directory standing in for this checkout
(its `.venv` is this checkout's), never this checkout's own `.local`, which the demo's test and a
developer's stack use: the README's commands get it as `SANDBOX_LOCAL_DIR`, the placeholder of the
host configuration is that directory. One stack for the whole file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from sandbox_common.tool_spec import TOOL_NAMES

from infra.local import stack
from infra.local.state import pid_alive, read_state
from tests.support.local_stack import ctl

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PLACEHOLDER = "/ABSOLUTE/PATH/TO/CHECKOUT"
NOT_RUN = re.compile(r"^<!-- not-run: (?P<reason>\S.*\S) -->$")
FENCE = re.compile(r"^```(?P<lang>[a-z]*)$")


@dataclass(frozen=True)
class Block:
    lang: str
    body: str
    line: int  # of the opening fence, 1-based
    not_run: str | None  # the reason, when a not-run marker precedes the block

    @property
    def first_command(self) -> str:
        return next(line for line in self.body.splitlines() if line.strip())

    @property
    def is_mcp_config(self) -> bool:
        return self.lang == "json" and '"mcpServers"' in self.body


def readme_blocks(text: str) -> list[Block]:
    """The fenced blocks of a markdown text, each with the not-run marker on the line before it."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = lines.index("```", i + 1)
        marker = NOT_RUN.match(lines[i - 1]) if i else None
        blocks.append(
            Block(
                lang=fence["lang"],
                body="\n".join(lines[i + 1 : end]) + "\n",
                line=i + 1,
                not_run=marker["reason"] if marker else None,
            )
        )
        i = end + 1
    return blocks


def _json_documents(text: str) -> list[Any]:
    """The JSON documents printed one after another (`sandboxctl invoke` prints one each)."""
    decoder, docs, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        doc, at = decoder.raw_decode(text, at)
        docs.append(doc)
    return docs


# --- what each runnable block must print, found by its first command ---------------------------------
def _check_up(out: str, runs: list[str]) -> None:
    assert re.search(r"^local stack (started|already running) \(stage local, state ", out, re.M), out
    assert re.search(r"^export AWS_ENDPOINT_URL_LAMBDA=http://127\.0\.0\.1:\d+$", out, re.M), out


def _check_cli_turn(out: str, runs: list[str]) -> None:
    begin, first, second, end = _json_documents(out)
    assert [begin["ok"], first["ok"], second["ok"], end["ok"]] == [True] * 4, out
    assert begin["sandbox"]["status"] == "ready" and begin["sandbox"]["tool"]["name"] == "execute_code"
    assert second["stdout"] == "42\n" and first["session_id"] == second["session_id"]
    assert end == {"ok": True, "stopped": True}
    # a fresh turn each run: its own session, not a replay of the previous run's answers
    earlier = [_json_documents(r)[2]["session_id"] for r in runs]
    assert second["session_id"] not in earlier


def _check_python_turn(out: str, runs: list[str]) -> None:
    assert out == "42\n"


def _check_operate(out: str, runs: list[str]) -> None:
    for expected in (
        "effective for acme: tenant_daily=1000, agent_hourly=100",
        "/thinkwork/local/sandbox/caps/tenants/globex/tenant_daily = 0 (was unset)",
        "/thinkwork/local/sandbox/caps/tenants/globex/tenant_daily deleted",
        "globex: disable: {'sandbox_enabled': True",
        "globex: enable: {'sandbox_enabled': False",
        "usage of tenant acme",
        "STARTED_AT",
        "thinkwork/local/tenants/acme/crm-token",
        "applies it within 60 s",
        "allow: api.example.com ports 443 credential Authorization: Bearer {secret:crm-token}",
        "packages: sandbox-hello",
    ):
        assert expected in out, (expected, out)
    assert re.search(r"^tenant_daily +acme +\d{4}-\d\d-\d\d +\d+ +1000 ", out, re.M), out


def _check_down(out: str, runs: list[str]) -> None:
    assert out.startswith("stopped: "), out
    assert (out == "stopped: nothing was running\n") == bool(runs), out  # the second run finds none


EXPECTED: dict[str, Callable[[str, list[str]], None]] = {
    ".venv/bin/sandboxctl local up ": _check_up,
    "TURN=turn-$(": _check_cli_turn,
    "eval \"$(.venv/bin/sandboxctl local up | grep '^export ')\"": _check_python_turn,
    ".venv/bin/sandboxctl --local caps get --tenant acme": _check_operate,
    ".venv/bin/sandboxctl local down ": _check_down,
}


def _expectation(block: Block) -> Callable[[str, list[str]], None]:
    found = [check for key, check in EXPECTED.items() if block.first_command.startswith(key)]
    assert len(found) == 1, f"README.md:{block.line}: say in EXPECTED what this block must print"
    return found[0]


# --- one local stack for the file ----------------------------------------------------------------------
@dataclass
class Checkout:
    """A directory standing in for this checkout: `.venv` is this checkout's, `.local` the test's."""

    path: Path
    env: dict[str, str]  # a shell's environment that reaches the stack in `path/.local`
    seen: set[int]  # every process of the stack seen running

    def note_processes(self) -> None:
        state = read_state(self.path / ".local")
        if state is not None:
            pids = [p["pid"] for p in state.data["processes"].values()]
            self.seen |= {d for pid in pids if pid_alive(pid) for d in stack.descendants(pid)}
            self.seen |= {pid for pid in pids if pid_alive(pid)}

    def up(self) -> None:
        out = ctl(self.env, "local", "up")
        assert out.returncode == 0, out.stderr
        self.note_processes()


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Checkout]:
    path = tmp_path_factory.mktemp("readme") / "checkout"
    path.mkdir()
    (path / ".venv").symlink_to(ROOT / ".venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SANDBOX_"))}
    env["SANDBOX_LOCAL_DIR"] = str(path / ".local")
    made = Checkout(path, env, set())
    try:
        yield made
    finally:
        made.note_processes()
        down = ctl(env, "local", "down", timeout=60)
    assert down.returncode == 0, down.stderr
    assert [pid for pid in made.seen if pid_alive(pid)] == []


# --- the tests -----------------------------------------------------------------------------------------
def test_readme_every_block_is_run_or_says_why_not() -> None:
    # Given the README's fenced blocks
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    # When sorting them into what runs here and what cannot
    runnable = [b for b in blocks if b.lang == "bash" and b.not_run is None]
    unexplained = [
        b.line
        for b in blocks
        if b.not_run is None and b.lang not in ("bash", "mermaid") and not b.is_mcp_config
    ]
    # Then every block that is not run says why, and each runnable block has its expectation
    assert unexplained == []
    assert len(runnable) == len(EXPECTED)
    assert sum(b.is_mcp_config for b in blocks) == 1
    for block in runnable:
        _expectation(block)


def test_readme_shell_blocks_run_twice_against_a_local_stack(checkout: Checkout) -> None:
    # Given the README's runnable shell blocks, in README order
    blocks = [
        b for b in readme_blocks(README.read_text(encoding="utf-8")) if b.lang == "bash" and not b.not_run
    ]
    assert blocks[0].first_command.startswith(".venv/bin/sandboxctl local up ")
    assert blocks[-1].first_command.startswith(".venv/bin/sandboxctl local down ")
    for block in blocks:
        check, runs = _expectation(block), []
        for _ in range(2):
            # When a shell runs the block as shown, from the checkout
            out = subprocess.run(
                ["bash", "-e", "-c", block.body],
                cwd=ROOT,
                env=checkout.env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            checkout.note_processes()
            # Then it exits 0 and prints what the README says, both times
            assert out.returncode == 0, f"README.md:{block.line}\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
            check(out.stdout, runs)
            runs.append(out.stdout)
    # and the last block stopped every process the stack ran
    assert [pid for pid in checkout.seen if pid_alive(pid)] == []


def test_readme_mcp_host_config_starts_a_server_that_lists_the_surface_tools(checkout: Checkout) -> None:
    # Given the README's MCP host configuration, as is, in a host's config file
    text = README.read_text(encoding="utf-8")
    (block,) = [b for b in readme_blocks(text) if b.is_mcp_config]
    assert f"replacing `{PLACEHOLDER}` with the absolute path of this checkout" in text
    host_file = checkout.path.parent / "claude_desktop_config.json"
    host_file.write_text(json.dumps(json.loads(block.body), indent=2))
    (server,) = json.loads(host_file.read_text())["mcpServers"].values()
    assert PLACEHOLDER in server["command"]

    def placed(value: str) -> str:
        return value.replace(PLACEHOLDER, str(checkout.path))

    # and a running local stack in that checkout's state directory
    checkout.up()
    params = StdioServerParameters(
        command=placed(server["command"]),
        args=[placed(a) for a in server["args"]],
        env={k: placed(v) for k, v in server["env"].items()},
    )

    async def tools() -> list[str]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return [t.name for t in (await session.list_tools()).tools]

    # When a host starts the server exactly as the file says and lists its tools
    names = anyio.run(tools)
    checkout.note_processes()
    # Then the server answers with the sandbox's tools (the template's own tools are not listed to a host)
    assert names == list(TOOL_NAMES)
