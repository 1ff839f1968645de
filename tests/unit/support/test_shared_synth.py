"""The run-wide synth cache (tests/support/synth.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from tests.support.synth import SharedSynth


def _counting_synth(calls: list[str]) -> Any:
    def synth_stage(stage: str) -> dict[str, dict[str, Any]]:
        calls.append(stage)
        time.sleep(0.2)  # long enough for the other worker to arrive while this one holds the lock
        return {f"Sandbox-{stage}-Core": {"Resources": {"T": {"Type": "AWS::DynamoDB::Table"}}}}

    return synth_stage


def test_shared_synth_two_workers_racing_synthesize_each_stage_once(tmp_path: Path) -> None:
    # Given two workers (separate caches over one run directory) wanting the same stage at once
    calls: list[str] = []
    workers = [SharedSynth(tmp_path, _counting_synth(calls)) for _ in range(2)]
    results: list[Any] = [None, None]

    def run(i: int) -> None:
        results[i] = workers[i]("dev")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    # When both ask
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then the stage was synthesized once, by one of them, and both got the same templates
    assert calls == ["dev"]
    assert sorted(len(w.synthesized) for w in workers) == [0, 1]
    assert (
        results[0]
        == results[1]
        == {"Sandbox-dev-Core": {"Resources": {"T": {"Type": "AWS::DynamoDB::Table"}}}}
    )


def test_shared_synth_each_stage_its_own_and_memoized(tmp_path: Path) -> None:
    # Given one worker
    calls: list[str] = []
    synth = SharedSynth(tmp_path, _counting_synth(calls))
    # When it asks for two stages, each twice
    first = synth("dev")
    synth("prod")
    # Then each stage is synthesized once and a second ask returns the same object
    assert synth("dev") is first
    assert synth("prod") is not first
    assert calls == ["dev", "prod"]


def test_shared_synth_without_xdist_synthesizes_in_process(tmp_path: Path) -> None:
    # Given no shared directory (a plain `pytest` run)
    calls: list[str] = []
    synth = SharedSynth(None, _counting_synth(calls))
    # When a stage is asked for / Then it is synthesized here and nothing is written
    synth("local")
    assert calls == ["local"] and synth.synthesized == ["local"]
    assert list(tmp_path.iterdir()) == []
