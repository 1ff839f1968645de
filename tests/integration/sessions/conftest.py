"""Sessions suite: the shared real-parts harness (moto server, local interpreter, quota Lambda
emulator, dispatch in-process) plus the reaper in-process with its CDK environment."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sandbox_common import aws, dimensions
from sandbox_common import naming as n

from infra.cdk.config import build_config
from infra.cdk.function_env import function_environment
from tests.support.stack import Stack, event, interpreter, jsonable, stack, turn_token_for

__all__ = ["Stack", "event", "interpreter", "jsonable", "stack", "reaper_stack", "turn_token_for"]


@pytest.fixture
def reaper_stack(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    """The stack, with this process also holding the reaper's environment (a fresh container)."""
    from reaper import service
    from sandbox_common import settings

    env = function_environment(build_config("local"), n.REAPER, tables=stack.resources.tables)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings.clear_caches()
    service.reset()
    yield stack
    service.reset()


def interpreter_id(stack: Stack, tenant: str = "acme", environment: str = "default-public") -> str:
    return next(
        i["id"]
        for i in stack.resources.interpreters
        if i["tenant_id"] == tenant and i["environment"] == environment
    )


def set_warm(tenant: str, environment: str, size: int) -> None:
    aws.client("ssm").put_parameter(
        Name=n.warm_sessions_parameter("local", tenant, environment),
        Value=str(size),
        Type="String",
        Overwrite=True,
    )


def set_session_cap(dimension: str, value: int, tenant: str | None = None) -> None:
    aws.client("ssm").put_parameter(
        Name=dimensions.parameter("local", dimension, tenant),
        Value=str(value),
        Type="String",
        Overwrite=True,
    )


def get_job_event(turn_id: str, job_id: str) -> dict[str, Any]:
    """A get_job of acme's agent-7 in `turn_id`, with the turn's token."""
    return {
        "action": "get_job",
        "tenant_id": "acme",
        "agent_id": "agent-7",
        "turn_id": turn_id,
        "job_id": job_id,
        "turn_token": turn_token_for("acme", turn_id),
    }


def slots_of(stack: Stack) -> list[Any]:
    from sandbox_common.sessions.ledger import SessionLedger

    return SessionLedger(
        table_name=stack.resources.tables[n.SESSIONS.logical], ddb=aws.client("dynamodb")
    ).slots()
