"""A test-only Lambda handler for the emulator tests: echoes what a real handler can observe."""

import os
import signal
import time

_COLD = {"pid": os.getpid(), "calls": 0}


def handler(event, context):
    _COLD["calls"] += 1
    print("this line goes to the log, not into the response")
    if event.get("raise"):
        raise ValueError(event["raise"])
    if event.get("sleep"):
        time.sleep(float(event["sleep"]))
    met = None
    if event.get("meet"):  # a rendezvous: wait (within the time left) until `party` calls arrived
        folder = event["meet"]
        open(os.path.join(folder, str(os.getpid())), "w").close()
        while not (met := len(os.listdir(folder)) >= event["party"]):
            if context.get_remaining_time_in_millis() < 300:
                break
            time.sleep(0.01)
    if event.get("exit"):
        os._exit(3)
    if event.get("sigkill"):  # what the kernel's OOM killer (or an operator's kill -9) does
        os.kill(os.getpid(), signal.SIGKILL)
    return {
        "event": event,
        "env": dict(os.environ),
        "pid": os.getpid(),
        "calls_in_this_worker": _COLD["calls"],
        "function_name": context.function_name,
        "invoked_function_arn": context.invoked_function_arn,
        "function_version": context.function_version,
        "request_id": context.aws_request_id,
        "remaining_ms": context.get_remaining_time_in_millis(),
        "met": met,
    }
