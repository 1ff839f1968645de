"""Background jobs at dispatch's call sites: submit, get_job, cancel_job and end_turn's pending
jobs. The jobs table and a job's end are the shared run time's (sandbox_runtime.job_store, job_end)."""
