"""Sessions suite: the shared real-parts harness (moto server, local interpreter, quota Lambda
emulator, dispatch in-process) plus the reaper in-process with its CDK environment."""

from __future__ import annotations

from typing import Any

from sandbox_common import aws, dimensions
from sandbox_common import naming as n

from tests.support.crash_points import get_job_event
from tests.support.stack import Stack, event, interpreter, jsonable, reaper_stack, stack, turn_token_for

__all__ = [
    "Stack",
    "event",
    "get_job_event",
    "interpreter",
    "jsonable",
    "stack",
    "reaper_stack",
    "turn_token_for",
]


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


def slots_of(stack: Stack) -> list[Any]:
    from sandbox_common.sessions.ledger import SessionLedger

    return SessionLedger(
        table_name=stack.resources.tables[n.SESSIONS.logical], ddb=aws.client("dynamodb")
    ).slots()
