"""`sandboxctl caps` for session caps, `warm` and `sessions` through the real CLI,
each command a process of its own (`ctl`, tests/support/ctl_server.py), against the module's local stack
(tests/cli/conftest.py; its reaper is invoked on demand)."""

from __future__ import annotations

import time
from typing import Any

from sandbox_common import dimensions
from sandbox_common import naming as n

from tests.support.local_stack import ctl, ctl_json, state_of

_state = state_of


def test_caps_set_session_caps_and_refuse_global_override(cli_env: dict[str, str]) -> None:
    # When tenant_sessions is overridden for acme
    out = ctl_json(cli_env, "caps", "set", "tenant_sessions", "3", "--tenant", "acme")
    # Then the override path holds it and the effective caps show it
    assert out["parameter"] == dimensions.parameter("local", dimensions.TENANT_SESSIONS.name, "acme")
    caps = ctl_json(cli_env, "caps", "get", "--tenant", "acme")
    assert caps["effective"]["tenant_sessions"] == 3
    assert caps["effective"]["global_sessions"] == 200
    ctl_json(cli_env, "caps", "unset", "tenant_sessions", "--tenant", "acme")
    # And global_sessions has no per-tenant override: refused with one line, nothing written
    refused = ctl(cli_env, "caps", "set", "global_sessions", "5", "--tenant", "acme")
    assert refused.returncode == 1
    assert "stage-wide" in refused.stderr
    assert ctl_json(cli_env, "caps", "get")["global"]["global_sessions"] == 200


def _pool(env: dict[str, str], tenant: str) -> dict[str, Any]:
    (pool,) = ctl_json(env, "warm", "show", "--tenant", tenant)
    return dict(pool)


def _wait_warm(env: dict[str, str], tenant: str, warm: int, limit_s: float = 120.0) -> dict[str, Any]:
    """`warm show` of the tenant's pool once it holds `warm` warm sessions (a state, not a delay)."""
    deadline = time.monotonic() + limit_s
    while (pool := _pool(env, tenant))["warm"] != warm or pool["starting"]:
        assert time.monotonic() < deadline, pool
        time.sleep(0.5)
    return pool


def test_warm_set_refills_the_pool_at_once_without_the_schedule(cli_env: dict[str, str]) -> None:
    # Given the local stack's reaper schedule far away (5 minutes) and globex's pool empty
    # When the operator sets a warm pool of 1 for globex
    out = ctl_json(cli_env, "warm", "set", "globex", "1", "--environment", "default-public")
    # Then the command asked the reaper to refill that pool now, and a warm session is ready
    # without any scheduled run
    assert out["refill"] == "started"
    assert _wait_warm(cli_env, "globex", 1)["warm_sessions"] == 1
    # And lowering it to 0 trims it the same way
    assert (
        ctl_json(cli_env, "warm", "set", "globex", "0", "--environment", "default-public")["refill"]
        == "started"
    )
    _wait_warm(cli_env, "globex", 0)


def test_warm_set_show_and_sessions_list_stop(cli_env: dict[str, str]) -> None:
    # Given a warm pool of 1 for acme, filled at once by the refill `warm set` starts
    out = ctl_json(cli_env, "warm", "set", "acme", "1", "--environment", "default-public")
    assert out["parameter"] == n.warm_sessions_parameter("local", "acme", "default-public")
    _wait_warm(cli_env, "acme", 1)
    # When the operator looks
    pools = ctl_json(cli_env, "warm", "show", "--tenant", "acme")
    listed = ctl_json(cli_env, "sessions", "list", "--all", "--tenant", "acme")
    serving = ctl_json(cli_env, "sessions", "list", "--tenant", "acme")
    # Then the pool and its session are visible (not among sessions serving turns)
    assert pools == [
        {"tenant": "acme", "environment": "default-public", "warm_sessions": 1, "warm": 1, "starting": 0}
    ]
    assert len(listed) == 1
    assert (listed[0]["state"], listed[0]["source"], listed[0]["calls"]) == ("warm", "warm", 0)
    assert set(n for n in listed[0]) >= {
        "session_id",
        "tenant",
        "agent",
        "turn",
        "environment",
        "state",
        "source",
        "started_at",
        "calls",
        "last_call_at",
    }
    assert serving == []
    # When it is stopped by id (then the pool set to 0, so no refill replaces it)
    stopped = ctl_json(cli_env, "sessions", "stop", listed[0]["session_id"])
    ctl_json(cli_env, "warm", "set", "acme", "0")
    # Then it is gone from the interpreter and the ledger
    assert stopped["freed"] is True
    interp = _state(cli_env).client("bedrock-agentcore")
    iid = n.interpreter_name("local", "acme", "default-public")
    got = interp.get_code_interpreter_session(
        codeInterpreterIdentifier=iid, sessionId=listed[0]["session_id"]
    )
    assert got["status"] == "TERMINATED"
    assert ctl_json(cli_env, "sessions", "list", "--all") == []


def test_sessions_stop_unknown_id_fails_with_one_line(cli_env: dict[str, str]) -> None:
    out = ctl(cli_env, "sessions", "stop", "01NOSUCHSESSION")
    assert out.returncode == 1
    assert len(out.stderr.strip().splitlines()) == 1
    assert "no live session" in out.stderr


def test_warm_set_refuses_environment_tenant_lacks(cli_env: dict[str, str]) -> None:
    out = ctl(cli_env, "warm", "set", "globex", "1", "--environment", "internal-only")
    assert out.returncode == 1
    assert "no internal-only environment" in out.stderr
