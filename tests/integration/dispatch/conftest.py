"""The dispatch suite runs on the shared real-parts harness in tests/support/stack.py (moto server,
local interpreter, quota Lambda in the local Lambda emulator, dispatch in-process); the
reliability suite uses the same one."""

from __future__ import annotations

from tests.support.stack import Stack, event, interpreter, jsonable, stack

__all__ = ["Stack", "event", "interpreter", "jsonable", "stack"]
