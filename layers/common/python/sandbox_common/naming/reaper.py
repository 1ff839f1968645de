"""The reaper: the sweeps that run on its schedule (hooks, and the modules declaring them), the
events it is sent, the log line of each session it stops."""

from __future__ import annotations

REAPER_HOOK_JOBS = "background_jobs"  # ends unpolled jobs (docs/jobs.md)
REAPER_JOBS_SWEEP_MODULE = "reaper.job_sweep"
REAPER_HOOK_INTERRUPTED = "dispatch_interrupted"  # finishes calls whose dispatch died
REAPER_INTERRUPTED_SWEEP_MODULE = "reaper.interrupted_sweep"
REAPER_HOOK_PAUSED = "paused_tool_calls"  # ends paused calls past their wait bound
REAPER_PAUSED_SWEEP_MODULE = "reaper.paused_sweep"
# The reaper's event that refills one pool (`{"refill": {"tenant_id", "environment"}}`): sent by
# `sandboxctl warm set` so a new size takes effect at once, not at the next scheduled run.
REFILL_EVENT_KEY = "refill"
# The reaper's event that lets the kill switch reach a tenant's admitted work now
# (`{"kill_switch": {"tenant_id": T}}`, `{}` inside for every tenant): sent by `sandboxctl caps set`
# / `tenant disable` when the change kills; on AWS the same run follows a change of a caps
# parameter (an EventBridge rule) or of a tenant's policy item (the tenants table's stream).
KILL_SWITCH_EVENT_KEY = "kill_switch"
# The reaper's pure-JSON log line per session it stops (its message and `event`; runbooks query it).
REAPER_EVENT_SESSION_REAPED = "session_reaped"
