"""One running local stack (`sandboxctl local up` in a temporary state dir) for every suite of
agents' ways in on this worker: the MCP server, the Strands tools, the agent client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from infra.local.state import LocalState
from tests.support.local_stack import running_stack, state_of


@pytest.fixture(scope="session")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with running_stack(tmp_path_factory.mktemp("agents-stack")) as env:
        yield env


@pytest.fixture(scope="session")
def state(env: dict[str, str]) -> LocalState:
    return state_of(env)
