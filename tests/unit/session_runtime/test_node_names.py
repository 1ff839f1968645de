"""The names the Node.js runner shares with the rest (it is stdlib-only and imports nothing of
ours, so each is spelled twice): the session environment's variables the local interpreter sets,
and the languages dispatch, the job runtime and the local interpreter's server take."""

from __future__ import annotations

from sandbox_common import naming, tool_spec
from sandbox_session import jobs, node

from infra.local.interpreter import protocol


def test_node_runner_names_equal_their_other_spellings() -> None:
    assert (node.ENV_NODE, node.ENV_TYPESCRIPT) == (naming.ENV_SESSION_NODE, naming.ENV_SESSION_TYPESCRIPT)
    assert node.LANGUAGES == tool_spec.NODE_LANGUAGES == jobs.NODE_LANGUAGES
    assert protocol.LANGUAGES == tool_spec.CODE_LANGUAGES
    assert f"process.env.{node.ENV_TYPESCRIPT}" in node.TRANSPILER
    assert node.TIMED_OUT == 124 and node.argv("typescript", "/n") == ["/n", "--input-type=module", "-"]
