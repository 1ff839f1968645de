"""What the dispatch Lambda and the session reaper both run, shipped in both functions' assets:
the session runner (`runner`), the jobs table and a job's end (`job_store`, `job_end`), finishing
interrupted calls (`interrupted`), the tenant's pre-flight and runner target (`preflight`)."""
