"""The container's parts: built once per container from settings, on first use (cached), so that
importing the handler creates no client and moto/the local stack can start first.

`Parts` holds what every call path shares — settings, the pre-flight reader, the turns table, the
audit writer, the tenants' session runners, the idempotency store, the turn's sessions, the quota
call, the usage accounting, the kill switch and the pool requests sent ahead go out on. The jobs'
parts (`jobs`) are built when a call first needs them; a capability's own parts (the
continuations table, the artifacts' S3 client) are built by that capability on its first use.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

from sandbox_common import aws
from sandbox_common.audit import AuditWriter
from sandbox_common.sessions.caps import SessionCapReader
from sandbox_common.sessions.ledger import SessionLedger, claim_min_life_seconds
from sandbox_common.settings import DispatchSettings, dispatch_settings
from sandbox_runtime.egress_store import EgressStore
from sandbox_runtime.interrupted import InterruptedCalls
from sandbox_runtime.kill_switch import KillSwitch
from sandbox_runtime.preflight import Preflight, PreflightReader
from sandbox_runtime.runner import SessionRunner
from sandbox_runtime.runner.egress import SessionEgress, session_egress_from

from dispatch import parallel
from dispatch.idempotency.store import IdempotentCalls
from dispatch.quota.budget import BudgetReader, PriceReader, UsageAccounting
from dispatch.quota.client import CheckQuota, check_quota
from dispatch.sessions.flow import TurnSessions
from dispatch.sessions.source import SessionSource
from dispatch.turns.store import TurnStore

if TYPE_CHECKING:
    from sandbox_runtime.job_end import JobDeps

COLD_SLOT_LEASE_MARGIN_SECONDS = 120


class Runners:
    """One SessionRunner per tenant (and its published substrate): it holds the tenant's cached
    STS credentials and clients, so later calls reuse them."""

    def __init__(self, settings: DispatchSettings, egress: SessionEgress | None = None) -> None:
        self.settings = settings
        self.egress = egress  # allowlist sessions' credentials and proxy (runner/egress.py)
        self.runners: dict[tuple[object, ...], SessionRunner] = {}
        self.lock = threading.Lock()

    def __call__(self, pf: Preflight) -> SessionRunner:
        key = (
            pf.tenant_id,
            str(pf.runner_role_arn),
            pf.allowed_interpreter_ids,
            pf.allowed_interpreter_arns,
            pf.egress_interpreters,
        )
        with self.lock:
            runner = self.runners.get(key)
            if runner is None:
                runner = self.runners[key] = SessionRunner(
                    tenant_id=pf.tenant_id,
                    allowed_interpreter_ids=pf.allowed_interpreter_ids,
                    allowed_interpreter_arns=pf.allowed_interpreter_arns,
                    runner_role_arn=str(pf.runner_role_arn),
                    session_timeout_seconds=self.settings.session_timeout_seconds,
                    call_timeout_seconds=self.settings.call_timeout_seconds,
                    stdout_cap_bytes=self.settings.stdout_cap_bytes,
                    stderr_cap_bytes=self.settings.stderr_cap_bytes,
                    egress=self.egress,
                    egress_interpreters=dict(pf.egress_interpreters),
                )
            return runner


@dataclass(eq=False)  # one per container, hashed by identity (a capability caches its parts on it)
class Parts:
    settings: DispatchSettings
    preflight: PreflightReader
    turns: TurnStore
    audit_writer: AuditWriter
    runners: Callable[[Preflight], SessionRunner]
    calls: IdempotentCalls
    sessions: TurnSessions
    accounting: UsageAccounting
    kill_switch: KillSwitch  # a resume and a running job stop when their tenant is killed
    quota: CheckQuota = check_quota
    egress: EgressStore | None = None  # allowlist sessions' credentials and counters (None: no egress)
    pool: ThreadPoolExecutor = field(default_factory=parallel.pool)  # requests sent ahead go out here

    @cached_property
    def jobs(self) -> JobDeps:
        """Background jobs' parts: the jobs table, the tenants' runners, the audit writer, the
        turn's state and the artifacts bucket, as the reaper's job sweep uses them too."""
        # Cold start: a job's end loads when a call first needs the jobs table.
        from sandbox_runtime.artifacts import s3_client
        from sandbox_runtime.job_end import JobDeps, job_files
        from sandbox_runtime.job_store import JobStore

        settings = self.settings

        def runner_for(tenant_id: str) -> SessionRunner:
            # The tenant's own runner (its role, its interpreters only), also after it was disabled:
            # ending a job and stopping its session must always be possible.
            return self.runners(self.preflight.runner_target(tenant_id))

        def turn_closed(tenant_id: str, turn_id: str) -> bool:
            turn = self.turns.get(tenant_id, turn_id)
            return bool(turn is not None and turn.tenant_id == tenant_id and turn.ended)

        return JobDeps(
            store=JobStore(table_name=settings.jobs_table, ddb=aws.client("dynamodb")),
            runner_for=runner_for,
            audit_writer=self.audit_writer,
            retention_days=settings.audit_retention_days,
            turn_closed=turn_closed,
            killed=self.kill_switch.check,
            collect_files=job_files(runner_for, settings.artifacts_bucket, s3_client())
            if settings.artifacts_bucket
            else None,
        )


@lru_cache(maxsize=1)
def built() -> Parts:
    settings = dispatch_settings()
    ddb = aws.client("dynamodb")
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
            PriceReader(stage=settings.stage, ssm=aws.client("ssm"), ttl_seconds=settings.cache_ttl_seconds),
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
    """The turn's session from the stage's managed sessions (warm pool + session caps)."""
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
