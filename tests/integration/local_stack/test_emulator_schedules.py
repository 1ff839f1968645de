"""The emulator runs the CDK app's scheduled rules (the session reaper) locally."""

from __future__ import annotations

import json
import time
from pathlib import Path

from sandbox_common import naming as n

from infra.cdk.config import build_config
from infra.local.lambda_emulator import FunctionSpec, LambdaEmulator, Schedule
from infra.local.stack import lambda_schedules
from infra.local.state import LocalResources

FIXTURES = Path(__file__).with_name("fixture_functions")


def test_emulator_schedule_invokes_function_with_scheduled_events(tmp_path: Path) -> None:
    # Given a function on a 0.3 s schedule
    ticks = tmp_path / "ticks.jsonl"
    spec = FunctionSpec(
        name="tick",
        handler="tick_fn.handler.handler",
        environment={"TICK_FILE": str(ticks)},
        task_root=str(FIXTURES),
        timeout_seconds=5,
        max_concurrency=1,
    )
    emulator = LambdaEmulator([spec], schedules=[Schedule(function="tick", rate_seconds=0.3)]).start()
    emulator.start_schedules()
    # When time passes
    deadline = time.time() + 20
    while time.time() < deadline and (not ticks.exists() or len(ticks.read_text().splitlines()) < 2):
        time.sleep(0.1)
    emulator.stop()
    # Then it was invoked repeatedly with EventBridge's scheduled-event payload
    events = [json.loads(line) for line in ticks.read_text().splitlines()]
    assert len(events) >= 2
    assert {(e["source"], e["detail-type"]) for e in events} == {("aws.events", "Scheduled Event")}


def test_local_stack_schedules_the_reaper_every_five_minutes(monkeypatch) -> None:
    # Given the local stage's resources
    monkeypatch.delenv("SANDBOX_LOCAL_REAPER_SECONDS", raising=False)
    config = build_config("local")
    resources = LocalResources(
        stage="local",
        region="us-east-1",
        account="123456789012",
        tables={},
        functions={f: n.function_name("local", f) for f in n.FUNCTIONS},
        audit_dlq_url="",
        security_topic_arn="",
    )
    # Then the reaper is scheduled at the CDK rule's rate
    assert lambda_schedules(resources) == [
        {"function": n.function_name(config.name, n.REAPER), "rate_seconds": 300.0}
    ]
