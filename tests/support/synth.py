"""Each stage synthesized once per test run, shared by every xdist worker (synth is the slow part:
a jsii/Node round trip per construct, CPU the 2-core machine's other workers need).

Under xdist the first worker that wants a stage synthesizes it while holding that stage's lock in
the run's shared temp directory and writes the templates there as JSON; any other worker waits on
the lock and reads the file. `synth_stage` itself returns the templates parsed from the cloud
assembly's JSON, so a template read back is the same data. The directory is per run (pytest's
basetemp), so no run ever sees another run's templates. Tests that are about synthesizing (cdk-nag
refusing, determinism, scaling) still call `synth_stage` themselves.
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

Templates = dict[str, dict[str, Any]]


class SharedSynth:
    """synth(stage) -> {stack name: template}; in-process memo, plus the run-wide file cache."""

    def __init__(self, shared_dir: Path | None, synth_stage: Callable[[str], Templates]) -> None:
        self._dir = shared_dir
        self._synth_stage = synth_stage
        self._memo: dict[str, Templates] = {}
        self.synthesized: list[str] = []  # stages this process synthesized itself

    def __call__(self, stage: str) -> Templates:
        if stage not in self._memo:
            self._memo[stage] = self._load(stage)
        return self._memo[stage]

    def _load(self, stage: str) -> Templates:
        if self._dir is None:  # not under xdist: nobody to share with
            self.synthesized.append(stage)
            return self._synth_stage(stage)
        self._dir.mkdir(parents=True, exist_ok=True)
        path = self._dir / f"{stage}.json"
        with open(self._dir / f"{stage}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also on a crash
            if path.exists():
                return json.loads(path.read_text(encoding="utf-8"))
            templates = self._synth_stage(stage)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(templates), encoding="utf-8")
            tmp.replace(path)  # complete or absent, never half written
            self.synthesized.append(stage)
            return templates
