"""The breakers reach the egress, on the local stack's proxy with its default caches: a policy
change, a calls cap of 0, a disabled tenant and a policy of `none` each close their scope's new
connections, and an open connection at its next request, within 60 s and without a restart.

Every wait is on state (poll until refused) and bounded by the 60 s the spec allows, plus the
machine's slack; the changes are made for three tenants at once so the module waits once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.egress import Proxy, Tunnel, egress_stack, wait_for
from tests.support.local_stack import ctl

WITHIN = 60 + 30  # the bound the spec allows, and slack for a loaded machine
ALLOW_BOTH = {"egress": "allowlist", "allow": [{"host": "open.example.com"}, {"host": "other.example.com"}]}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], Proxy]]:
    names = ["open.example.com", "other.example.com"]
    with egress_stack(tmp_path_factory.mktemp("egress-breakers"), names=names) as (env, _server):
        proxy = Proxy.of(env)
        for tenant in ("acme", "globex", "canary"):
            proxy.set_policy(tenant, ALLOW_BOTH)
        yield env, proxy


def _session(proxy: Proxy, tenant: str, source: str) -> tuple[str, str]:
    session = f"brk-{tenant}"
    secret = proxy.issue(session, tenant)
    assert proxy.bind(session, secret, source=source).status == 200
    return session, secret


def test_breakers_policy_change_cap_zero_and_disabled_tenant_close_egress_within_60s(
    stack: tuple[dict[str, str], Proxy],
) -> None:
    env, proxy = stack
    # Given three tenants' sessions whose hosts are reachable, each with a connection held open
    sessions = {
        "acme": _session(proxy, "acme", "127.0.0.1"),
        "globex": _session(proxy, "globex", "127.0.0.5"),
        "canary": _session(proxy, "canary", "127.0.0.6"),
    }
    sources = {"acme": "127.0.0.1", "globex": "127.0.0.5", "canary": "127.0.0.6"}
    tunnels = {}
    for tenant, (session, secret) in sessions.items():
        assert (
            proxy.get(session, secret, "https://open.example.com/echo", source=sources[tenant]).status == 200
        )
        tunnels[tenant] = Tunnel(proxy, session, secret, "open.example.com", source=sources[tenant])
        assert tunnels[tenant].get("/echo?open").status == 200
    try:
        # When, without a restart: acme's policy drops open.example.com, globex's calls cap is
        # set to 0, canary is disabled
        assert (
            ctl(
                env,
                "egress",
                "set",
                "--tenant",
                "acme",
                "--environment",
                "default-allowlist",
                "--allow",
                "other.example.com",
            ).returncode
            == 0
        )
        assert ctl(env, "caps", "set", "tenant_daily", "0", "--tenant", "globex").returncode == 0
        assert ctl(env, "tenant", "disable", "canary").returncode == 0
        expected = {"acme": "not_allowed", "globex": "cap_zero", "canary": "tenant_disabled"}

        # Then each scope's new connections are refused within the bound ...
        def refused(tenant: str) -> bool:
            session, secret = sessions[tenant]
            answer = proxy.get(session, secret, "https://open.example.com/echo?after", source=sources[tenant])
            return answer.status == 403 and answer.reason == expected[tenant]

        for tenant in expected:
            wait_for(lambda tenant=tenant: refused(tenant), timeout=WITHIN, what=f"{tenant}'s egress closed")
        # ... and the connections they held open are refused at their next request
        for tenant, reason in expected.items():
            answer = tunnels[tenant].get("/echo?next")
            assert answer.status == 403 and answer.reason == reason, (tenant, answer.status, answer.reason)
        # And acme's other host, still allowed, still answers (only the change applied)
        session, secret = sessions["acme"]
        assert proxy.get(session, secret, "https://other.example.com/echo").status == 200
    finally:
        for tunnel in tunnels.values():
            tunnel.close()
        ctl(env, "caps", "unset", "tenant_daily", "--tenant", "globex")
        ctl(env, "tenant", "enable", "canary")


def test_breakers_policy_none_closes_the_environment_within_60s(stack: tuple[dict[str, str], Proxy]) -> None:
    env, proxy = stack
    # Given a tenant whose other host answers
    session, secret = "brk-none", proxy.issue("brk-none", "acme")
    assert proxy.bind(session, secret).status == 200
    wait_for(
        lambda: proxy.get(session, secret, "https://other.example.com/echo").status == 200,
        timeout=WITHIN,
        what="acme's other host allowed",
    )
    # When the operator sets the environment's policy to `none`
    done = ctl(env, "egress", "set", "--tenant", "acme", "--environment", "default-allowlist", "--none")
    assert done.returncode == 0, done.stderr
    # Then nothing of it is reachable within the bound
    wait_for(
        lambda: (
            (a := proxy.get(session, secret, "https://other.example.com/echo")).status == 403
            and a.reason == "egress_closed"
        ),
        timeout=WITHIN,
        what="the environment closed",
    )
