"""One synthesized template set per stage for the whole session (synth is the slow part)."""

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
def synth() -> Callable[[str], Templates]:
    """synth(stage) -> {stack name: template}, synthesized once per stage per session."""
    from infra.app_factory import synth_stage

    cache: dict[str, Templates] = {}

    def _get(stage: str) -> Templates:
        if stage not in cache:
            cache[stage] = synth_stage(stage)
        return cache[stage]

    return _get


@pytest.fixture(scope="session")
def all_stages(synth: Callable[[str], Templates]) -> dict[str, Templates]:
    return {stage: synth(stage) for stage in STAGES}
