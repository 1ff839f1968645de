"""The dispatch suite runs on the shared real-parts harness in tests/support/stack.py (moto server,
local interpreter, quota Lambda in the local Lambda emulator, dispatch in-process); the
reliability suite uses the same one."""

from __future__ import annotations

import pytest
from sandbox_common import naming as n

from tests.support.stack import Stack, event, interpreter, jsonable, stack

__all__ = ["Stack", "event", "interpreter", "jsonable", "short_deadline", "stack"]


@pytest.fixture
def short_deadline(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    """The stack with a 3 s per-call deadline (the session stops code at 2 s)."""
    from dispatch import parts as dependencies
    from sandbox_common import settings

    monkeypatch.setenv(n.ENV_CALL_TIMEOUT, "3")
    settings.clear_caches()
    dependencies.reset()
    return stack
