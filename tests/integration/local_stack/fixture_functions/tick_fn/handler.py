"""A test-only handler for the emulator's schedules: appends each event it gets to TICK_FILE."""

import json
import os


def handler(event, context):
    with open(os.environ["TICK_FILE"], "a", encoding="utf-8") as out:
        out.write(json.dumps(event) + "\n")
    return {"ok": True}
