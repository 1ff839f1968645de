"""The container's parts: built once per container from settings, on first use (cached), so that
importing the handler creates no client and moto/the local stack can start first.

`Parts` holds what every call path shares — settings, the pre-flight reader, the turns table,
the audit writer, the tenants' session runners, the idempotency store, the turn's sessions, the
quota call and the usage accounting. A capability's own parts (the continuations table, the
jobs' dependencies, the artifacts' S3 client) are built by that capability when its action
first runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from sandbox_common import aws
from sandbox_common import naming as n
from sandbox_common.audit import AuditWriter
from sandbox_common.observability import logger
from sandbox_common.sessions.caps import SessionCapReader
from sandbox_common.sessions.ledger import SessionLedger, claim_min_life_seconds
from sandbox_common.settings import DispatchSettings, dispatch_settings
from sandbox_runtime.cache import TtlCache
from sandbox_runtime.egress_store import EgressStore
from sandbox_runtime.interrupted import InterruptedCalls
from sandbox_runtime.kill_switch import KillSwitch
from sandbox_runtime.preflight import Preflight, PreflightReader
from sandbox_runtime.runner import SessionRunner
from sandbox_runtime.runner.egress import SessionEgress, session_egress_from

from dispatch.idempotency import IdempotentCalls
from dispatch.quota.budget import BudgetReader, UsageAccounting
from dispatch.quota.client import CheckQuota, check_quota
from dispatch.sessions.flow import TurnSessions
from dispatch.sessions.source import SessionSource
from dispatch.turns.store import TurnStore

COLD_SLOT_LEASE_MARGIN_SECONDS = 120


class Runners:
    """One SessionRunner per tenant (and its published substrate): it holds the tenant's cached
    STS credentials and clients, so later calls reuse them."""

    def __init__(self, settings: DispatchSettings, egress: SessionEgress | None = None) -> None:
        self._settings = settings
        self.egress = egress  # allowlist sessions' credentials and proxy (runner/egress.py)
        self._runners: dict[tuple[object, ...], SessionRunner] = {}
        self._lock = threading.Lock()

    def __call__(self, pf: Preflight) -> SessionRunner:
        key = (
            pf.tenant_id,
            str(pf.runner_role_arn),
            pf.allowed_interpreter_ids,
            pf.allowed_interpreter_arns,
            pf.egress_interpreters,
        )
        with self._lock:
            runner = self._runners.get(key)
            if runner is None:
                runner = self._runners[key] = SessionRunner(
                    tenant_id=pf.tenant_id,
                    allowed_interpreter_ids=pf.allowed_interpreter_ids,
                    allowed_interpreter_arns=pf.allowed_interpreter_arns,
                    runner_role_arn=str(pf.runner_role_arn),
                    session_timeout_seconds=self._settings.session_timeout_seconds,
                    call_timeout_seconds=self._settings.call_timeout_seconds,
                    stdout_cap_bytes=self._settings.stdout_cap_bytes,
                    stderr_cap_bytes=self._settings.stderr_cap_bytes,
                    egress=self.egress,
                    egress_interpreters=dict(pf.egress_interpreters),
                )
            return runner


@dataclass(eq=False)  # one per container, hashed by identity (steps.current caches on it)
class Parts:
    settings: DispatchSettings
    preflight: PreflightReader
    turns: TurnStore
    audit_writer: AuditWriter
    runners: Callable[[Preflight], SessionRunner]
    calls: IdempotentCalls
    sessions: TurnSessions
    accounting: UsageAccounting
    kill_switch: KillSwitch  # §22: a resume and a running job stop when their tenant is killed
    quota: CheckQuota = check_quota
    egress: EgressStore | None = None  # allowlist sessions' credentials and counters (None: no egress)


@lru_cache(maxsize=1)
def built() -> Parts:
    settings = dispatch_settings()
    ddb = aws.client("dynamodb")
    prices: TtlCache[float] = TtlCache(settings.cache_ttl_seconds)

    def price_per_call() -> float:
        def load() -> float:
            try:
                raw = aws.client("ssm").get_parameter(Name=n.cost_per_call_parameter(settings.stage))
                return max(0.0, float(raw["Parameter"]["Value"]))
            except Exception as exc:  # noqa: BLE001 — cost is an estimate: never fail a call over it
                logger.warning("cost_parameter_unreadable", extra={"cause": type(exc).__name__})
                return 0.0

        return prices.get_or_load("price", load)

    turns = TurnStore(table_name=settings.turns_table, ddb=ddb)
    audit_writer = AuditWriter(
        table_name=settings.invocations_table,
        dlq_url=settings.audit_dlq_url,
        ddb=ddb,
        sqs=aws.client("sqs"),
        spool_path=settings.audit_spool_path or None,
    )
    preflight = PreflightReader(
        stage=settings.stage,
        tenants_table=settings.tenants_table,
        ttl_seconds=settings.cache_ttl_seconds,
        ssm=aws.client("ssm"),
        ddb=ddb,
    )
    session_egress = session_egress_from(settings, ddb)
    return Parts(
        settings=settings,
        preflight=preflight,
        turns=turns,
        audit_writer=audit_writer,
        runners=Runners(settings, session_egress),
        calls=IdempotentCalls(
            table_name=settings.idempotency_table,
            ddb=ddb,
            audit_writer=audit_writer,
            interrupted=InterruptedCalls(
                table_name=settings.idempotency_table,
                ddb=ddb,
                audit_writer=audit_writer,
                retention_days=settings.audit_retention_days,
                jobs_table=settings.jobs_table,
            ),
        ),
        sessions=turn_sessions(settings, turns, ddb),
        accounting=UsageAccounting(
            price_per_call,
            BudgetReader(stage=settings.stage, ssm=aws.client("ssm"), ttl_seconds=settings.cache_ttl_seconds),
        ),
        kill_switch=KillSwitch.for_stage(
            stage=settings.stage,
            tenants_table=settings.tenants_table,
            cache_ttl_seconds=settings.cache_ttl_seconds,
            ssm=aws.client("ssm"),
            ddb=ddb,
        ),
        egress=session_egress.store if session_egress is not None else None,
    )


def turn_sessions(settings: DispatchSettings, turns: TurnStore, ddb: object) -> TurnSessions:
    """The turn's session from the stage's managed sessions (§16): warm pool + session caps."""
    source = SessionSource(
        ledger=SessionLedger(table_name=settings.sessions_table, ddb=ddb),
        caps_for=SessionCapReader(
            stage=settings.stage, ssm=aws.client("ssm"), ttl_seconds=settings.cache_ttl_seconds
        ).caps_for,
        claim_min_life_seconds=claim_min_life_seconds(settings.call_timeout_seconds),
        # A cold slot is held through the quota hop, the turn-lease wait and Start + preamble.
        lease_seconds=settings.call_timeout_seconds + COLD_SLOT_LEASE_MARGIN_SECONDS,
    )
    return TurnSessions(
        turns=turns,
        source=source,
        session_timeout_seconds=settings.session_timeout_seconds,
        call_timeout_seconds=settings.call_timeout_seconds,
    )


def reset() -> None:
    """Tests: forget the container's state (a new 'cold start')."""
    built.cache_clear()
