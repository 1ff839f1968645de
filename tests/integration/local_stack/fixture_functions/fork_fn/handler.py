"""A test-only Lambda handler for the fork-server tests: it records each import of itself in the
file IMPORT_LOG names, optionally leaves a thread running after its import (START_THREAD=1), and
reports what a worker process is made of."""

import os
import threading

IMPORTED_BY = os.getpid()
with open(os.environ["IMPORT_LOG"], "a", encoding="utf-8") as log:
    log.write(f"{IMPORTED_BY}\n")
if os.environ.get("START_THREAD") == "1":
    threading.Thread(target=threading.Event().wait, name="left-running", daemon=True).start()
_STATE = {"calls": 0}


def handler(event, context):
    _STATE["calls"] += 1
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass  # the listing's own descriptor, closed by now
    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "imported_by": IMPORTED_BY,
        "calls": _STATE["calls"],
        "fds": fds,
        "stream_env": os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME"),
        "stream_context": context.log_stream_name,
    }
