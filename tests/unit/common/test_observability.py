"""EMF lines carry exactly the dimensions given, even with POWERTOOLS_SERVICE_NAME set (as in
Lambda): alarms are built from naming.METRIC_DIMENSIONS and must match them exactly."""

from __future__ import annotations

import json

import pytest
from sandbox_common.observability import emit_metric


def test_emit_metric_has_exactly_given_dimensions(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "sandbox-dispatch")
    emit_metric("SandboxCalls", dimensions={"exit_status": "ok"})
    emit_metric("SandboxReadinessFailed")
    first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert first["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["exit_status"]]
    assert first["exit_status"] == "ok" and "service" not in first
    assert second["_aws"]["CloudWatchMetrics"][0]["Dimensions"] in ([[]], [])
    assert second["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "ThinkworkSandbox"
