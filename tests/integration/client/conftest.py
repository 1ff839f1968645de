"""The client suite runs against the shared real-parts harness (tests/support/stack.py): dispatch
and the quota Lambda behind the local Lambda emulator, moto, the local interpreter."""

from __future__ import annotations

from tests.support.stack import interpreter, stack

__all__ = ["interpreter", "stack"]
