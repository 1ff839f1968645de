"""`sandboxctl` for the local stack, usage errors, caps, tenants and templates: the real CLI, each command a
process of its own (`ctl`, tests/support/ctl_server.py), against the module's local stack
(tests/cli/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sandbox_common import dimensions
from sandbox_common import naming as n

from tests.support.local_stack import assert_one_line_failure, ctl, ctl_json, ctl_process, state_of

_state = state_of


# --- local -----------------------------------------------------------------------------------
def test_local_status_shows_the_isolation_in_force(cli_env: dict[str, str]) -> None:
    # Given the module's running stack (bubblewrap and slirp4netns installed by `make os-deps`)
    # When the operator asks for its status, as JSON and as text
    data = ctl_json(cli_env, "local", "status")
    text = ctl(cli_env, "local", "status")
    # Then both name the strategy, the per-session uid, the network handling and the limits
    isolation = data["isolation"]
    assert isolation["strategy"] == "bwrap" and isolation["isolated"] is True
    assert isolation["network"]["SANDBOX"] == "own namespace, loopback only"
    assert "slirp4netns" in isolation["network"]["PUBLIC"] and "unreachable" in isolation["network"]["PUBLIC"]
    assert isolation["limits"]["session_tasks"] > 0
    assert text.returncode == 0
    assert "isolation: bwrap; uid: one unprivileged uid per session" in text.stdout
    assert "network PUBLIC: own namespace + slirp4netns egress" in text.stdout
    # and the egress proxy allowlist sessions go through, with the CA certificate they trust
    egress = data["egress"]
    assert egress["proxy"].startswith("127.0.0.1:") and egress["ca_cert"].endswith("egress-ca-cert.pem")
    assert f"egress proxy: {egress['proxy']} (CA certificate {egress['ca_cert']})" in text.stdout


def test_local_up_twice_is_idempotent(cli_env: dict[str, str]) -> None:
    # Given the module's running stack
    before = ctl_json(cli_env, "local", "status")
    # When `local up` runs again
    again = ctl_json(cli_env, "local", "up")
    # Then nothing was started and the same processes and endpoints are reported
    assert again["started"] is False
    assert again["pids"] == {k: v["pid"] for k, v in before["processes"].items()}
    assert before["running"] is True
    assert set(again["endpoints"]) == {"moto", "interpreter", "lambda", "egress", "index"}


def test_local_up_names_the_dispatch_function_beside_the_endpoints(cli_env: dict[str, str]) -> None:
    # Given the module's running stack, whose dispatch function the state names
    dispatch = _state(cli_env).resources.functions[n.DISPATCH]
    # When `local up` reports, as JSON and as text
    data = ctl_json(cli_env, "local", "up")
    text = ctl(cli_env, "local", "up")
    # Then both name the function an agent invokes at the lambda endpoint
    assert data["dispatch_function"] == dispatch
    assert text.returncode == 0 and f"dispatch function: {dispatch} " in text.stdout
    assert data["endpoints"]["lambda"] in text.stdout


# What an everyday `--local` command must not load: reading the stack's state is not starting
# one (infra.local.stack, the interpreter, the CDK configuration), and pydantic is for the
# commands that validate with it (`tenant show`, the file pointers, `pilot`, `mcp`, `local up`).
NOT_LOADED_BY_EVERYDAY_COMMANDS = ("pydantic", "infra.local.stack", "infra.local.interpreter", "infra.cdk")


@pytest.mark.parametrize(
    "args", [("caps", "get", "--tenant", "acme"), ("audit", "list", "--tenant", "acme", "--limit", "1")]
)
def test_everyday_local_command_loads_only_what_it_uses(
    cli_env: dict[str, str], args: tuple[str, ...]
) -> None:
    # Given the module's running stack
    # When an everyday command runs as a new process, with Python reporting every module it imports
    out = ctl_process({**cli_env, "PYTHONPROFILEIMPORTTIME": "1"}, "--local", *args)
    # Then it succeeded, and it imported none of the start-up code
    assert out.returncode == 0, out.stderr
    loaded = {
        line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")
    }
    assert "infra.local.state" in loaded and "boto3" in loaded
    assert not {
        m for m in loaded if m.split(".")[0] == "pydantic" or m.startswith(NOT_LOADED_BY_EVERYDAY_COMMANDS)
    }


# --- usage -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        (),
        ("caps", "frob"),
        ("caps", "set", "weekly", "5"),
        ("tenant", "set-tier", "acme", "platinum"),
        ("template", "put", "acme", "analyst"),
        ("audit", "list"),
        ("tenant", "show", "Not_A_Tenant"),
    ],
)
def test_sandboxctl_bad_usage_exits_2(cli_env: dict[str, str], args: tuple[str, ...]) -> None:
    # Given a malformed command line
    # When it runs
    out = ctl(cli_env, *args)
    # Then exit code 2, usage on stderr, no traceback
    assert_one_line_failure(out, 2, "usage:")


def test_sandboxctl_without_local_stack_fails_with_one_line(tmp_path: Path) -> None:
    # Given no local stack in this state dir
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SANDBOX_"))}
    env.update(SANDBOX_LOCAL_DIR=str(tmp_path), SANDBOX_LOCAL="1")
    # When a command needs it
    out = ctl(env, "caps", "get")
    # Then a one-line reason tells the operator what to do
    assert_one_line_failure(out, 1, "local up")


# --- caps ------------------------------------------------------------------------------------
def test_caps_get_shows_configured_defaults(cli_env: dict[str, str]) -> None:
    # Given a fresh local stage
    # When caps are read
    caps = ctl_json(cli_env, "caps", "get")
    # Then the SPEC defaults are in SSM
    assert caps["global"] == {
        "tenant_daily": 1000,
        "agent_hourly": 100,
        "tenant_sessions": 20,
        "global_sessions": 200,
        "egress_daily_bytes": 1 << 30,
    }


def test_caps_set_tenant_override_is_read_back_and_unset(cli_env: dict[str, str]) -> None:
    # Given acme without overrides
    # When its agent_hourly override is set to 7
    out = ctl_json(cli_env, "caps", "set", "agent_hourly", "7", "--tenant", "acme")
    # Then SSM holds "7" at the override path and the effective cap changes, the global does not
    ssm = _state(cli_env).client("ssm")
    assert out["parameter"] == dimensions.parameter("local", dimensions.AGENT_HOURLY.name, "acme")
    assert ssm.get_parameter(Name=out["parameter"])["Parameter"]["Value"] == "7"
    caps = ctl_json(cli_env, "caps", "get", "--tenant", "acme")
    assert caps["effective"] == {
        "tenant_daily": 1000,
        "agent_hourly": 7,
        "tenant_sessions": 20,
        "global_sessions": 200,
        "egress_daily_bytes": 1 << 30,
    }
    assert caps["global"]["agent_hourly"] == 100
    # and unset restores the global value
    ctl_json(cli_env, "caps", "unset", "agent_hourly", "--tenant", "acme")
    assert ctl_json(cli_env, "caps", "get", "--tenant", "acme")["effective"]["agent_hourly"] == 100


def test_caps_set_global_zero_is_the_kill_switch_value(cli_env: dict[str, str]) -> None:
    # Given the global tenant_daily cap
    # When it is set to 0 and then back
    zero = ctl_json(cli_env, "caps", "set", "tenant_daily", "0")
    back = ctl_json(cli_env, "caps", "set", "tenant_daily", "1000")
    # Then 0 is accepted (the kill switch) and the previous value is reported each time
    assert (zero["value"], zero["previous"]) == (0, 1000)
    assert (back["value"], back["previous"]) == (1000, 0)


def test_caps_set_negative_is_refused(cli_env: dict[str, str]) -> None:
    # Given a negative cap
    # When it is set
    out = ctl(cli_env, "caps", "set", "agent_hourly", "-5", "--tenant", "acme")
    # Then usage error 2 naming the reason, and nothing was written
    assert_one_line_failure(out, 2, "negative")
    assert "acme" not in ctl_json(cli_env, "caps", "get")["overrides"]


def test_caps_set_for_unknown_tenant_is_refused(cli_env: dict[str, str]) -> None:
    # Given a tenant that does not exist
    # When an override is set for it
    out = ctl(cli_env, "caps", "set", "tenant_daily", "5", "--tenant", "nobody")
    # Then exit 1 with a one-line reason
    assert_one_line_failure(out, 1, "unknown tenant 'nobody'")


# --- tenants and templates -------------------------------------------------------------------
def test_tenant_tier_and_enable_rules_with_history(cli_env: dict[str, str]) -> None:
    # Given globex, standard and enabled by default
    assert ctl_json(cli_env, "tenant", "show", "globex")["sandbox_enabled"] is True
    # When it moves to hipaa
    moved = ctl_json(cli_env, "tenant", "set-tier", "globex", "hipaa")
    # Then the move also disabled it
    assert moved["after"] == {"sandbox_enabled": False, "compliance_tier": "hipaa"}
    # and enabling on hipaa is refused
    assert_one_line_failure(ctl(cli_env, "tenant", "enable", "globex"), 1, "refused", "hipaa")
    # and back on standard it stays disabled until enabled explicitly
    assert ctl_json(cli_env, "tenant", "set-tier", "globex", "standard")["after"]["sandbox_enabled"] is False
    assert ctl_json(cli_env, "tenant", "enable", "globex")["after"]["sandbox_enabled"] is True
    # and every change is recorded with who and when
    shown = ctl_json(cli_env, "tenant", "show", "globex")
    assert [h["action"] for h in shown["history"]] == ["set-tier hipaa", "set-tier standard", "enable"]
    assert {h["changed_by"] for h in shown["history"]} == {"local:op-alice"}
    assert all(h["changed_at"].endswith("Z") for h in shown["history"])
    assert shown["policy"]["updated_by"] == "local:op-alice"


def test_tenant_disable_then_enable(cli_env: dict[str, str]) -> None:
    # Given acme enabled
    # When it is disabled
    ctl_json(cli_env, "tenant", "disable", "acme")
    # Then the policy item says so (what dispatch pre-flight reads), and enable restores it
    item = (
        _state(cli_env)
        .client("dynamodb")
        .get_item(
            TableName=n.TENANTS.physical("local"),
            Key={n.TENANTS.pk: {"S": "acme"}, n.TENANTS.sk: {"S": n.TENANT_POLICY_ITEM}},
        )["Item"]
    )
    assert item["sandbox_enabled"] == {"BOOL": False}
    assert ctl_json(cli_env, "tenant", "enable", "acme")["after"]["sandbox_enabled"] is True


def test_tenant_unknown_is_refused(cli_env: dict[str, str]) -> None:
    # Given a tenant with neither a substrate nor a policy item
    # When it is shown or enabled
    for args in (("tenant", "show", "nobody"), ("tenant", "enable", "nobody")):
        # Then exit 1, one line
        assert_one_line_failure(ctl(cli_env, *args), 1, "unknown tenant 'nobody'")


def test_template_put_sets_and_refuses_missing_environment(cli_env: dict[str, str]) -> None:
    # Given acme (public + internal) and globex (public only)
    # When acme's analyst template moves to internal-only, then to none, then back
    moved = ctl_json(cli_env, "template", "put", "acme", "analyst", "--environment", "internal-only")
    none = ctl_json(cli_env, "template", "put", "acme", "analyst", "--environment", "none")
    ctl_json(cli_env, "template", "put", "acme", "analyst", "--environment", "default-public")
    # Then each change is stored (none = null), and globex cannot use an environment it lacks
    assert (moved["previous"], moved["environment"]) == ("default-public", "internal-only")
    assert (none["previous"], none["environment"]) == ("internal-only", None)
    refused = ctl(cli_env, "template", "put", "globex", "analyst", "--environment", "internal-only")
    assert_one_line_failure(refused, 1, "refused", "internal-only")
    assert (
        ctl_json(cli_env, "tenant", "show", "acme")["templates"]["analyst"]["environment"] == "default-public"
    )


def test_template_put_tools_sets_keeps_and_clears_the_allowlist(cli_env: dict[str, str]) -> None:
    # Given acme's analyst template
    # When an allowlist is set, the environment changed without --tools, then the list cleared
    set_ = ctl_json(
        cli_env,
        "template",
        "put",
        "acme",
        "analyst",
        "--environment",
        "default-public",
        "--tools",
        "query_sales,lookup-customer,query_sales",
    )
    kept = ctl_json(cli_env, "template", "put", "acme", "analyst", "--environment", "default-public")
    shown = ctl_json(cli_env, "tenant", "show", "acme")["templates"]["analyst"]
    cleared = ctl_json(
        cli_env, "template", "put", "acme", "analyst", "--environment", "default-public", "--tools", ""
    )

    # Then the list is stored sorted and de-duplicated, kept when omitted, cleared by ''
    assert set_["tools"] == ["lookup-customer", "query_sales"]
    assert kept["tools"] == ["lookup-customer", "query_sales"]
    assert shown["tools"] == ["lookup-customer", "query_sales"]
    assert (cleared["previous_tools"], cleared["tools"]) == (["lookup-customer", "query_sales"], [])


def test_template_put_tools_invalid_name_is_bad_usage(cli_env: dict[str, str]) -> None:
    # Given / When a tool name that is not an identifier-like name
    result = ctl(
        cli_env,
        "template",
        "put",
        "acme",
        "analyst",
        "--environment",
        "default-public",
        "--tools",
        "ok,rm -rf",
    )

    # Then exit 2 (bad usage) and nothing stored
    assert result.returncode == 2
    assert "invalid tool name" in result.stderr
    assert ctl_json(cli_env, "tenant", "show", "acme")["templates"]["analyst"].get("tools", []) == []
