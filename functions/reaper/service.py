"""Wiring of one reaper run: the ledger, the turns table, the tenants' runners, warm sizes.

Sessions are stopped and started only through the shared run time's session runner
(sandbox_runtime.runner) with the tenant's own session-runner role: the reaper ships that
package (see infra/cdk/constructs/compute.py SHARED_PACKAGES) instead of a second AgentCore client.

Cold start: importing this module (and so the handler) loads the sweep, the refill, the ledger
and the jobs table, and no pydantic. What needs pydantic — the settings, the pre-flight reader,
the kill switch, the session runner, a tenant's substrate — and the sweeps plugged into `hooks`
load when a run first builds or uses them (`reaper()`, `_runner`, `Reaper._substrate`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sandbox_common import audit, aws
from sandbox_common import naming as n
from sandbox_common.sessions.caps import SessionCapReader
from sandbox_common.sessions.ledger import SessionLedger, Slot
from sandbox_runtime.job_store import JobStore

from . import hooks, refill, sweep

if TYPE_CHECKING:
    from sandbox_common.models import TenantSubstrate
    from sandbox_common.settings import ReaperSettings
    from sandbox_runtime.kill_switch import KillSwitch
    from sandbox_runtime.preflight import PreflightReader
    from sandbox_runtime.runner import SessionRunner


@dataclass
class Reaper:
    settings: ReaperSettings
    ledger: SessionLedger
    ddb: Any
    ssm: Any
    preflight: PreflightReader
    caps: SessionCapReader
    kill_switch: KillSwitch  # killed tenants' jobs are cancelled, their warm pools emptied

    def runner(self, tenant_id: str) -> SessionRunner:
        target = self.preflight.runner_target(tenant_id)
        return _runner(
            tenant_id,
            str(target.runner_role_arn),
            target.allowed_interpreter_ids,
            target.allowed_interpreter_arns,
            self.settings.session_timeout_seconds,
            self.settings.call_timeout_seconds,
            target.egress_interpreters,
        )

    def stop(self, slot: Slot) -> bool:
        if not slot.session_id or not slot.interpreter_id:
            return True  # nothing was started (or its id never came back): only capacity to free
        try:
            runner = self.runner(slot.tenant_id)
        except Exception:  # noqa: BLE001 — unknown tenant substrate: cannot stop; keep the slot
            return False
        return runner.stop_session(slot.interpreter_id, slot.session_id)

    def start(self, tenant_id: str, environment: str) -> tuple[str, str]:
        substrate = self._substrate(tenant_id)
        interpreter_id = substrate.interpreters.get(environment) if substrate else None
        if substrate is None or substrate.compliance_tier != "standard" or not interpreter_id:
            raise LookupError("no standard-tier interpreter published for this tenant × environment")
        session_id = self.runner(tenant_id).start_session(interpreter_id, name=f"sbx-warm-{tenant_id}")
        return interpreter_id, session_id

    def _substrate(self, tenant_id: str) -> TenantSubstrate | None:
        # Imported here for cold start alone: the tenant models (pydantic) load at the first warm start.
        from sandbox_common.models import TenantSubstrate

        try:
            raw = self.ssm.get_parameter(Name=n.tenant_substrate_parameter(self.settings.stage, tenant_id))
            return TenantSubstrate.model_validate(json.loads(raw["Parameter"]["Value"]))
        except Exception:  # noqa: BLE001 — no substrate, no warm session: the refill skips the pool
            return None

    def run(self, *, refill_only: tuple[str, str] | None = None) -> dict[str, Any]:
        now = time.time()
        summary: dict[str, Any] = {}
        if refill_only is None:
            # The hooks first: a sweep that ends work (the job sweep stops the session of a turn's
            # last job) frees it before the session sweep looks, so its slot is released this run.
            summary["hooks"] = hooks.run_all(now)
            summary["sweep"] = sweep.sweep(
                self.ledger,
                turn_reader=lambda tenant_id, turn_id: sweep.read_turn(
                    self.ddb, self.settings.turns_table, tenant_id, turn_id
                ),
                stop=self.stop,
                now=now,
                session_timeout_seconds=self.settings.session_timeout_seconds,
                busy_sessions=self.jobs().busy_sessions if self.settings.jobs_table else None,
            ).to_dict()
        sizes = refill.desired_sizes(self.ssm, self.settings.stage)
        summary["refill"] = refill.refill(
            self.ledger,
            sizes=sizes,
            only=refill_only,
            killed=lambda tenant_id: self.kill_switch.check(tenant_id) is not None,
            caps_for=self.caps.caps_for,
            start=self.start,
            stop=self.stop,
            now=time.time,
            session_timeout_seconds=self.settings.session_timeout_seconds,
            call_timeout_seconds=self.settings.call_timeout_seconds,
        ).to_dict()
        return summary

    def jobs(self) -> JobStore:
        """Background jobs' store: the job sweep ends jobs, the session sweep spares busy sessions."""
        return JobStore(table_name=self.settings.jobs_table, ddb=self.ddb)

    def audit_writer(self) -> audit.AuditWriter:
        """The stage's audit table and dead-letter queue, for the rows the reaper's sweeps write (an
        ended job's, a finished interrupted call's)."""
        return audit.AuditWriter(
            table_name=self.settings.invocations_table,
            dlq_url=self.settings.audit_dlq_url,
            ddb=self.ddb,
            sqs=aws.client("sqs"),
            spool_path=self.settings.audit_spool_path or None,
        )


@lru_cache(maxsize=64)
def _runner(
    tenant_id: str,
    role_arn: str,
    allowed: tuple[str, ...],
    arns: tuple[str, ...],
    session_timeout: int,
    call_timeout: int,
    egress_interpreters: tuple[tuple[str, str], ...] = (),
) -> SessionRunner:
    # Imported here for cold start alone: the session runner loads when a run first stops or
    # starts a session.
    from sandbox_common.settings import reaper_settings
    from sandbox_runtime.runner import SessionRunner
    from sandbox_runtime.runner.egress import session_egress_from

    # The stage's output caps, as dispatch's runner has them: a job the reaper ends is answered
    # (a later get_job) and audited from this runner's shaping of its output.
    settings = reaper_settings()
    return SessionRunner(
        tenant_id=tenant_id,
        allowed_interpreter_ids=allowed,
        allowed_interpreter_arns=arns,
        runner_role_arn=role_arn,
        session_timeout_seconds=session_timeout,
        call_timeout_seconds=call_timeout,
        stdout_cap_bytes=settings.stdout_cap_bytes,
        stderr_cap_bytes=settings.stderr_cap_bytes,
        # a warm session of an allowlist environment gets its proxy credential like any other,
        # and a stopped one has it revoked
        egress=session_egress_from(settings, aws.client("dynamodb")),
        egress_interpreters=dict(egress_interpreters),
    )


@lru_cache(maxsize=1)
def reaper() -> Reaper:
    # Imported here for cold start alone: the settings, the pre-flight reader and the kill switch
    # need pydantic, which the handler's import does not load.
    from sandbox_common.settings import reaper_settings
    from sandbox_runtime.kill_switch import KillSwitch
    from sandbox_runtime.preflight import PreflightReader

    hooks.load()  # the sweeps other modules plug in (hooks.SWEEP_MODULES)
    settings = reaper_settings()
    ddb = aws.client("dynamodb")
    ssm = aws.client("ssm")
    preflight = PreflightReader(
        stage=settings.stage,
        tenants_table=settings.tenants_table,
        ttl_seconds=settings.cache_ttl_seconds,
        ssm=ssm,
        ddb=ddb,
    )
    return Reaper(
        settings=settings,
        ledger=SessionLedger(table_name=settings.sessions_table, ddb=ddb),
        ddb=ddb,
        ssm=ssm,
        preflight=preflight,
        caps=SessionCapReader(stage=settings.stage, ssm=ssm, ttl_seconds=settings.cache_ttl_seconds),
        kill_switch=KillSwitch.for_stage(
            stage=settings.stage,
            tenants_table=settings.tenants_table,
            cache_ttl_seconds=settings.cache_ttl_seconds,
            ssm=ssm,
            ddb=ddb,
        ),
    )


def reset() -> None:
    reaper.cache_clear()
    _runner.cache_clear()
