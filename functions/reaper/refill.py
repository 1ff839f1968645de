"""Warm-pool refill, off the agent's critical path.

Desired size per tenant × environment: SSM `/…/tenants/{t}/warm/{env}` (absent = 0). A warm
session is reserved in the ledger first (it counts against tenant_sessions / global_sessions like
any other), started, taken through the readiness preamble by the session runner, and only then
offered in the pool (`make_warm`): a session whose preamble failed is released and never handed
out. Recycle time = start + session timeout − (call timeout + margin), so a claimed session still
has a whole call's life left; the sweep stops unclaimed ones at that time and the next refill
replaces them. A pool larger than desired (size lowered) loses its extra warm sessions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sandbox_common import limits
from sandbox_common import naming as n
from sandbox_common.observability import logger
from sandbox_common.sessions.caps import SessionCapsUnavailable
from sandbox_common.sessions.ledger import (
    LedgerUnavailable,
    SessionCapReached,
    SessionCaps,
    SessionLedger,
    Slot,
)

RECYCLE_MARGIN_SECONDS = limits.WARM_RECYCLE_MARGIN_SECONDS
# Never start more than this many warm sessions in one run (a mistyped pool size must not burst).
MAX_STARTS_PER_RUN = 20


def recycle_at(started: float, *, session_timeout_seconds: int, call_timeout_seconds: int) -> int:
    return int(started + session_timeout_seconds - call_timeout_seconds - RECYCLE_MARGIN_SECONDS)


def desired_sizes(ssm: Any, stage: str) -> dict[tuple[str, str], int]:
    """(tenant, environment) -> warm_sessions, from every `/…/tenants/*/warm/*` parameter.
    A value that is not a non-negative integer counts as 0 (logged)."""
    prefix = n.tenant_parameters_prefix(stage)
    pattern = re.compile(re.escape(prefix) + r"([^/]+)/warm/([^/]+)$")
    sizes: dict[tuple[str, str], int] = {}
    for page in ssm.get_paginator("get_parameters_by_path").paginate(Path=prefix, Recursive=True):
        for parameter in page.get("Parameters", []):
            match = pattern.match(parameter["Name"])
            if not match or match.group(2) not in n.ENVIRONMENTS:
                continue
            raw = parameter.get("Value", "")
            if not re.fullmatch(r"[0-9]{1,4}", raw):
                logger.error(
                    "ignoring warm_sessions parameter: not a small non-negative integer",
                    extra={"parameter": parameter["Name"]},
                )
                continue
            sizes[(match.group(1), match.group(2))] = int(raw)
    return sizes


@dataclass
class RefillReport:
    started: int = 0
    failed: int = 0
    trimmed: int = 0
    refused: dict[str, str] = field(default_factory=dict)  # "tenant#env" -> why none could start

    def to_dict(self) -> dict[str, Any]:
        return {
            "started": self.started,
            "failed": self.failed,
            "trimmed": self.trimmed,
            "refused": self.refused,
        }


def refill(
    ledger: SessionLedger,
    *,
    sizes: dict[tuple[str, str], int],
    only: tuple[str, str] | None = None,
    killed: Callable[[str], bool] = lambda _tenant_id: False,
    caps_for: Callable[[str], SessionCaps],
    start: Callable[[str, str], tuple[str, str]],
    stop: Callable[[Slot], bool],
    now: Callable[[], float],
    session_timeout_seconds: int,
    call_timeout_seconds: int,
) -> RefillReport:
    """`start(tenant, environment)` -> (interpreter_id, session_id), preamble passed, or raises.
    `only`: the one pool this run refills (its sizes and its warm sessions alone: another
    tenant's pool is never looked at, let alone trimmed). `killed(tenant)`: the kill switch is on
    for the tenant — its pool is emptied and not refilled."""
    report = RefillReport()
    slots = ledger.slots()
    pools: dict[tuple[str, str], list[Slot]] = {}
    for slot in slots:
        if slot.source == "warm" and slot.state in ("warm", "starting"):
            pools.setdefault((slot.tenant_id, slot.environment), []).append(slot)
    budget = MAX_STARTS_PER_RUN
    for key in sorted(set(sizes) | set(pools)):
        if only is not None and key != only:
            continue
        tenant, environment = key
        have = pools.get(key, [])
        want = 0 if killed(tenant) else sizes.get(key, 0)
        for extra in [s for s in have if s.state == "warm"][: max(0, len(have) - want)]:
            if stop(extra) and ledger.release(extra.slot_id):
                report.trimmed += 1
        for _ in range(max(0, want - len(have))):
            if budget <= 0:
                return report
            budget -= 1
            if not _warm_one(
                ledger,
                tenant,
                environment,
                report,
                caps=caps_for(tenant),
                start=start,
                stop=stop,
                now=now,
                session_timeout_seconds=session_timeout_seconds,
                call_timeout_seconds=call_timeout_seconds,
            ):
                break
    return report


def _warm_one(
    ledger: SessionLedger,
    tenant: str,
    environment: str,
    report: RefillReport,
    *,
    caps: SessionCaps,
    start: Callable[[str, str], tuple[str, str]],
    stop: Callable[[Slot], bool],
    now: Callable[[], float],
    session_timeout_seconds: int,
    call_timeout_seconds: int,
) -> bool:
    """One warm session reserved, started and offered (counted in `report`); False when the tenant's
    caps refuse it, so its pool grows no further this run."""
    try:
        reservation = ledger.reserve(
            tenant_id=tenant,
            environment=environment,
            source="warm",
            caps=caps,
            lease_seconds=call_timeout_seconds + 120,
        )
    except (SessionCapReached, SessionCapsUnavailable, LedgerUnavailable) as exc:
        # Warm sessions never exceed the caps: a full tenant simply has a smaller pool.
        report.refused[f"{tenant}#{environment}"] = getattr(exc, "dimension", None) or type(exc).__name__
        return False
    try:
        interpreter_id, session_id = start(tenant, environment)
    except Exception as exc:  # noqa: BLE001 — a failed start/preamble is released, never offered
        logger.warning(
            "warm_start_failed",
            extra={
                "tenant_id": tenant,
                "environment": environment,
                "failure_reason": getattr(exc, "failure_reason", type(exc).__name__),
            },
        )
        ledger.release(reservation.slot_id)
        report.failed += 1
        return True
    offered = ledger.make_warm(
        reservation.slot_id,
        session_id=session_id,
        interpreter_id=interpreter_id,
        recycle_at=recycle_at(
            now(),
            session_timeout_seconds=session_timeout_seconds,
            call_timeout_seconds=call_timeout_seconds,
        ),
    )
    if not offered:  # the slot was reaped while we started: never leave the session running
        stop(
            Slot(
                slot_id=reservation.slot_id,
                tenant_id=tenant,
                environment=environment,
                state="starting",
                source="warm",
                started_at=int(now()),
                session_id=session_id,
                interpreter_id=interpreter_id,
            )
        )
        report.failed += 1
        return True
    report.started += 1
    return True
