"""`sandboxctl egress get|set|show` and `sandboxctl secrets put|list` against the local stack: what
they print, their exit codes (0 ok, 1 refused with one line naming the field, 2 usage), and that a
refused policy changes nothing."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support.local_stack import SANDBOXCTL, assert_one_line_failure, ctl, ctl_json

ENV = "default-allowlist"


def _set(cli_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return ctl(cli_env, "egress", "set", "--tenant", "acme", "--environment", ENV, *args)


def _secret(cli_env: dict[str, str], tenant: str, name: str, value: str) -> subprocess.CompletedProcess[str]:
    """`sandboxctl secrets put` with the value on its standard input (a process of its own)."""
    return subprocess.run(
        [SANDBOXCTL, "secrets", "put", "--tenant", tenant, name],
        input=value,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def secrets(cli_env: dict[str, str]) -> dict[str, str]:
    assert _secret(cli_env, "acme", "crm-token", "acme-crm-token-value\n").returncode == 0
    assert _secret(cli_env, "globex", "globex-token", "globex-token-value").returncode == 0
    return {"acme": "crm-token", "globex": "globex-token"}


def test_sandboxctl_egress_get_without_a_stored_policy_allows_nothing(cli_env: dict[str, str]) -> None:
    got = ctl_json(cli_env, "egress", "get", "--tenant", "globex", "--environment", ENV)
    assert got == {"egress": "allowlist", "allow": [], "packages": []}


def test_sandboxctl_egress_set_replaces_the_policy_and_get_prints_it(
    cli_env: dict[str, str], secrets: dict[str, str]
) -> None:
    # When the operator sets hosts, a credential and packages
    done = _set(
        cli_env,
        "--allow",
        "api.example.com",
        "*.example.org:8443",
        "--allow",
        "api.example.com:8443",
        "--credential",
        "api.example.com=Authorization:Bearer {secret:crm-token}",
        "--packages",
        "sandbox-hello==1.0.0",
        "Sandbox_Colors",
    )
    assert done.returncode == 0, done.stderr
    assert "applies it within 60 s" in done.stdout
    # Then get prints exactly it (hosts merged with their ports, package names normalized)
    got = ctl_json(cli_env, "egress", "get", "--tenant", "acme", "--environment", ENV)
    assert got == {
        "egress": "allowlist",
        "allow": [
            {
                "host": "api.example.com",
                "ports": [443, 8443],
                "credential": {"header": "Authorization", "template": "Bearer {secret:crm-token}"},
            },
            {"host": "*.example.org", "ports": [8443]},
        ],
        "packages": ["sandbox-hello==1.0.0", "sandbox-colors"],
    }
    human = ctl(cli_env, "egress", "get", "--tenant", "acme", "--environment", ENV)
    assert "allow: api.example.com ports 443,8443 credential Authorization" in human.stdout


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--allow", "*"), "allow[0].host"),
        (("--allow", "*.com"), "allow[0].host"),
        (("--allow", "10.0.0.1"), "allow[0].host"),
        (("--allow", "[::1]"), "allow[0].host"),
        (("--allow", "2130706433"), "allow[0].host"),
        (("--allow", "0177.0.0.1"), "allow[0].host"),
        (("--allow", "user@api.example.com"), "allow[0].host"),
        (("--allow", "api.example.com:http"), "allow[0]"),
        (
            ("--allow", "a.example.com", "--credential", "b.example.com=X-Key:{secret:crm-token}"),
            "credential[0]",
        ),
        (
            ("--allow", "api.example.com:80", "--credential", "api.example.com=X-Key:{secret:crm-token}"),
            "allow[0].credential",
        ),
        (
            ("--allow", "api.example.com", "--credential", "api.example.com=X-Key:{secret:globex-token}"),
            "allow[0].credential.template",
        ),
        (
            ("--allow", "api.example.com", "--credential", "api.example.com=Host:{secret:crm-token}"),
            "allow[0].credential.header",
        ),
        (
            ("--allow", "api.example.com", "--credential", "api.example.com=X-Key:plain"),
            "allow[0].credential.template",
        ),
        (("--packages", "bad name!"), "packages[0]"),
        (("--none", "--allow", "api.example.com"), "egress"),
    ],
)
def test_sandboxctl_egress_set_refuses_a_bad_policy_naming_the_field_and_changes_nothing(
    cli_env: dict[str, str], secrets: dict[str, str], args: tuple[str, ...], field: str
) -> None:
    before = ctl_json(cli_env, "egress", "get", "--tenant", "acme", "--environment", ENV)
    out = _set(cli_env, *args)
    assert_one_line_failure(out, 1, f"refused: {field}")
    assert ctl_json(cli_env, "egress", "get", "--tenant", "acme", "--environment", ENV) == before


def test_sandboxctl_egress_set_refuses_another_tenants_secret(
    cli_env: dict[str, str], secrets: dict[str, str]
) -> None:
    # globex's secret exists, but not among acme's: acme's policy cannot name it
    out = _set(
        cli_env, "--allow", "api.example.com", "--credential", "api.example.com=X-Key:{secret:globex-token}"
    )
    assert_one_line_failure(out, 1, "secret 'globex-token' is not one of the tenant's secrets")


def test_sandboxctl_egress_set_none_closes_and_refuses_public_environments(cli_env: dict[str, str]) -> None:
    done = ctl(cli_env, "egress", "set", "--tenant", "globex", "--environment", ENV, "--none")
    assert done.returncode == 0, done.stderr
    assert ctl_json(cli_env, "egress", "get", "--tenant", "globex", "--environment", ENV)["egress"] == "none"
    out = ctl(
        cli_env,
        "egress",
        "set",
        "--tenant",
        "globex",
        "--environment",
        "default-public",
        "--allow",
        "a.example.com",
    )
    assert_one_line_failure(out, 1, "environment: default-public")


def test_sandboxctl_egress_usage_errors_exit_2(cli_env: dict[str, str]) -> None:
    assert ctl(cli_env, "egress", "set", "--tenant", "acme").returncode == 2
    assert ctl(cli_env, "egress", "get", "--tenant", "acme", "--environment", "nowhere").returncode == 2
    assert ctl(cli_env, "egress", "show").returncode == 2
    assert ctl(cli_env, "secrets", "put", "--tenant", "acme", "Bad_Name").returncode == 2


def test_sandboxctl_egress_unknown_tenant_and_session_fail(cli_env: dict[str, str]) -> None:
    assert_one_line_failure(
        ctl(cli_env, "egress", "get", "--tenant", "nobody", "--environment", ENV), 1, "nobody"
    )
    assert_one_line_failure(
        ctl(cli_env, "egress", "show", "--session", "no-such-session"), 1, "no-such-session"
    )


def test_sandboxctl_secrets_put_and_list_show_names_never_values(
    cli_env: dict[str, str], secrets: dict[str, str]
) -> None:
    # When a secret is replaced from standard input
    put = _secret(cli_env, "acme", "crm-token", "a-new-value-for-crm")
    assert put.returncode == 0 and "replaced" in put.stdout
    assert "a-new-value-for-crm" not in put.stdout + put.stderr
    # Then list names it (and only acme's), never a value
    listed = ctl(cli_env, "--json", "secrets", "list", "--tenant", "acme")
    assert json.loads(listed.stdout) == {"tenant_id": "acme", "secrets": ["crm-token"]}
    assert "value" not in listed.stdout
    # And a value too short to be scrubbed reliably is refused
    assert_one_line_failure(_secret(cli_env, "acme", "short", "abc"), 1, "at least 8")
