"""The local stack the CLI tests drive: one per test module, so each file's tests see only their
own changes and xdist can run the files side by side."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.local_stack import running_stack


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with running_stack(tmp_path_factory.mktemp("sandboxctl-stack"), USER="op-alice") as env:
        yield env
