"""The interrupted-calls sweep, a reaper hook: a call whose dispatch died and that no
retry came back for is finished here with its one `dispatch_interrupted` audit row, through
`sandbox_runtime.interrupted.InterruptedCalls.sweep` — the very transition a retry takes, so a retry, this
sweep and a second reaper racing each other finish the call once (one conditional UpdateItem wins).

Only records past their in-progress deadline (the moment the Lambda runtime killed the attempt)
are listed (sparse `by_open_attempt` index). The dead call's session is not known here (it is
chosen after the claim): the session sweep reaps it and frees its ledger slot, as for any
session whose turn went quiet.
"""

from __future__ import annotations

from typing import Any

from sandbox_common import naming as n
from sandbox_runtime.interrupted import InterruptedCalls

from .service import Reaper, reaper

# Of the reaper's 300 s: this sweep stops after this long (what is left is first in the next run).
INTERRUPTED_SWEEP_BUDGET_SECONDS = 60


def interrupted_calls(r: Reaper) -> InterruptedCalls:
    settings = r.settings
    return InterruptedCalls(
        table_name=settings.idempotency_table,
        ddb=r.ddb,
        audit_writer=r.audit_writer(),
        retention_days=settings.audit_retention_days,
        jobs_table=settings.jobs_table,
    )


def finish_interrupted(now: float) -> dict[str, Any]:
    """The hook: {"finished": n, "recovered": n, "lost": n} for the run's log line."""
    return dict(interrupted_calls(reaper()).sweep(until=now + INTERRUPTED_SWEEP_BUDGET_SECONDS))


# Registered by the reaper's hooks.load() (SWEEP_MODULES names this module).
SWEEP_HOOKS = {n.REAPER_HOOK_INTERRUPTED: finish_interrupted}
