"""Sessions suite: the shared real-parts harness (moto server, local interpreter, quota Lambda
emulator, dispatch in-process) plus the reaper in-process with its CDK environment."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sandbox_common import aws, dimensions
from sandbox_common import naming as n

from tests.support.runner import cell_arguments
from tests.support.stack import (
    Stack,
    event,
    get_job_event,
    interpreter,
    jsonable,
    reaper_stack,
    stack,
    turn_token_for,
)

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


# --- through dispatch: what test_dispatch_sessions.py and test_dispatch_warm.py share ----------
def together(stack: Stack, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every event dispatched at the same moment (threads released by one barrier); answers in order."""
    barrier = threading.Barrier(len(events))

    def send(request: dict[str, Any]) -> dict[str, Any]:
        barrier.wait()
        return stack.dispatch(request)

    with ThreadPoolExecutor(max_workers=len(events)) as pool:
        return list(pool.map(send, events))


def dispatch_runner() -> Any:
    """The tenant runner dispatch itself uses (its cached clients are the ones dispatch calls)."""
    from dispatch import parts as dependencies

    d = dependencies.built()
    return d.runners(d.preflight.check("acme", "analyst"))


CELL_DRIVER_START = "def _sbx_cell("


class AgentCoreLog:
    """Every Start, and the code of every executeCode, that dispatch's runner sends (real requests)."""

    def __init__(self) -> None:
        self.starts = 0
        self.codes: list[str] = []
        runner = dispatch_runner()
        runner.credentials.control_client().meta.events.register(
            "before-parameter-build.bedrock-agentcore.StartCodeInterpreterSession", self._start
        )
        runner.credentials.invoke_client().meta.events.register(
            "before-parameter-build.bedrock-agentcore.InvokeCodeInterpreter", self._invoke
        )

    def _start(self, **_: Any) -> None:
        self.starts += 1

    def _invoke(self, params: dict[str, Any], **_: Any) -> None:
        """The code sent; for a Python call, the user code its driver carries."""
        code = str((params.get("arguments") or {}).get("code", ""))
        if code.startswith(CELL_DRIVER_START):
            code = cell_arguments(code)[1]
        self.codes.append(code)

    def preambles(self) -> int:
        from sandbox_runtime.runner.session import readiness_source

        return self.codes.count(readiness_source())


def rows_by_call(stack: Stack) -> dict[str, dict[str, Any]]:
    return {r["call_id"]: r for r in stack.audit_rows()}


def daily_count(stack: Stack) -> int:
    return sum(
        int(i[n.COUNTER_ATTR_COUNT]["N"]) for i in stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical]
    )


def turn_item(turn_id: str) -> Any:
    from dispatch import parts as dependencies

    return dependencies.built().turns.get("acme", turn_id)


def on_start(action: Any) -> list[int]:
    """Run `action()` once, when dispatch's runner sends its next StartCodeInterpreterSession."""
    ran: list[int] = []

    def hook(**_: Any) -> None:
        if not ran:
            ran.append(1)
            action()

    dispatch_runner().credentials.control_client().meta.events.register(
        "before-parameter-build.bedrock-agentcore.StartCodeInterpreterSession", hook
    )
    return ran
