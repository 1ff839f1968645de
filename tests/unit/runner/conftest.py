"""The session runner against the AgentCore double (tests/support/agentcore_double.py): every
executeCode a unit test makes is scripted (`fake.script_invoke`); tests that let the double run
code for real live in tests/integration/runner."""

from __future__ import annotations

from tests.support.agentcore_double import assume_role_calls, fake_agentcore, make_runner, sts

__all__ = ["assume_role_calls", "fake_agentcore", "make_runner", "sts"]
