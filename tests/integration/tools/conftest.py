"""Programmatic tool calling against the real local interpreter.

Fixtures in tests/support/tools_session.py."""

from __future__ import annotations

from tests.support.stack import interpreter
from tests.support.tools_session import ToolsSession, tools_session

__all__ = ["ToolsSession", "interpreter", "tools_session"]
