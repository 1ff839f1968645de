"""One synthesized template set per stage for the whole run (synth is the slow part): the
`synth` fixture lives in tests/conftest.py (tests/support/synth.py shares it across workers)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

# jsii's Node 20 end-of-life banner would otherwise be printed by every jsii start.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

STAGES = ("local", "dev", "staging", "prod")
Templates = dict[str, dict[str, Any]]


@pytest.fixture(scope="session")
def all_stages(synth: Callable[[str], Templates]) -> dict[str, Templates]:
    return {stage: synth(stage) for stage in STAGES}
