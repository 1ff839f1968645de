"""The session runner against the AgentCore double (tests/support/agentcore_double.py), which
runs each unscripted executeCode in a real `python -c`, and against acme's local interpreter."""

from __future__ import annotations

from tests.support.agentcore_double import assume_role_calls, fake_agentcore, make_runner, sts
from tests.support.runner import acme_interpreter

__all__ = ["acme_interpreter", "assume_role_calls", "fake_agentcore", "make_runner", "sts"]
