"""The tool definitions packaged with the client, for when dispatch cannot be asked.

The definitions a client serves are the ones `begin_turn` returns (built in the common layer's
`tool_spec`, with the stage's figures and the template's callable tools). An MCP host lists a
server's tools once, often before anything else runs — before the local stack is up, before
credentials are set — and may never list them again. So the client carries a copy of the
definitions as dispatch builds them with the default figures and no template tool
(`tool_definitions.json`, rewritten by `make client-definitions`; tests/unit/client/test_contract.py
checks it equals `tool_spec`'s), and the MCP server lists that copy until `begin_turn` answers.
The client never imports the common layer: the copy is data.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

PACKAGED_FILE = "tool_definitions.json"


@functools.lru_cache(maxsize=1)
def _packaged_text() -> str:
    return resources.files(__package__).joinpath(PACKAGED_FILE).read_text(encoding="utf-8")


def packaged() -> list[dict[str, Any]]:
    """The packaged definitions (a fresh copy: callers may not change the cached one)."""
    definitions = json.loads(_packaged_text())
    if not isinstance(definitions, list):
        raise ValueError(f"{PACKAGED_FILE} is not a list of tool definitions")
    return definitions
