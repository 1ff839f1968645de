"""The stage config refuses a bad egress policy or egress setting at synth, naming the field, and
changes nothing (build_config raises before any construct exists)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from infra.cdk.config import ConfigError, build_config


def _tenant(**fields: Any) -> dict[str, Any]:
    return {
        "id": "acme",
        "environments": ["default-public", "default-allowlist"],
        "templates": {"allowlisted": "default-allowlist"},
        "secrets": ["crm-token"],
        **fields,
    }


def _policy(*allow: Any, **extra: Any) -> dict[str, Any]:
    return {"egress": {"default-allowlist": {"allow": list(allow), **extra}}}


CREDENTIAL = {"header": "Authorization", "template": "Bearer {secret:crm-token}"}


@pytest.mark.parametrize(
    ("tenant", "field", "message"),
    [
        (_tenant(**_policy("*")), "egress.default-allowlist.allow[0].host", "bare \\*"),
        (_tenant(**_policy({"host": "*."})), "egress.default-allowlist.allow[0].host", "bare \\*"),
        (
            _tenant(**_policy("api.example.com", "10.0.0.1")),
            "egress.default-allowlist.allow[1].host",
            "IP address",
        ),
        (_tenant(**_policy("2130706433")), "egress.default-allowlist.allow[0].host", "IP address"),
        (_tenant(**_policy("0177.0.0.1")), "egress.default-allowlist.allow[0].host", "IP address"),
        (_tenant(**_policy("[::1]")), "egress.default-allowlist.allow[0].host", "IP address"),
        (_tenant(**_policy("0x7f.0.0.1")), "egress.default-allowlist.allow[0].host", "IP address"),
        # a credential only ever rides on an allowed host's rule: one for another host has nowhere
        # to go but an unknown field
        (
            _tenant(
                egress={
                    "default-allowlist": {"allow": [], "credentials": [{"host": "evil.com", **CREDENTIAL}]}
                }
            ),
            "egress.default-allowlist.credentials",
            "unknown field",
        ),
        (
            _tenant(**_policy({"host": "api.example.com", "ports": [80, 443], "credential": CREDENTIAL})),
            "egress.default-allowlist.allow[0].credential",
            "only sent over HTTPS",
        ),
        (
            _tenant(
                **_policy(
                    {
                        "host": "api.example.com",
                        "credential": {"header": "X-Key", "template": "{secret:globex-key}"},
                    }
                )
            ),
            "egress.default-allowlist.allow[0].credential.template",
            "not one of the tenant's secrets",
        ),
        (
            _tenant(secrets=[], **_policy({"host": "api.example.com", "credential": CREDENTIAL})),
            "egress.default-allowlist.allow[0].credential.template",
            "not one of the tenant's secrets",
        ),
        (
            _tenant(egress={"internal-only": {"allow": []}}),
            "egress.internal-only",
            "not declared for the tenant",
        ),
        (
            _tenant(egress={"default-public": {"allow": []}}),
            "egress.default-public",
            "only an allowlist environment has a policy",
        ),
        (_tenant(egress={"nowhere": {"allow": []}}), "egress.nowhere", "not declared"),
        (
            _tenant(**_policy("api.example.com", packages=["bad name"])),
            "egress.default-allowlist.packages[0]",
            "NAME or NAME==VERSION",
        ),
        (_tenant(secrets=["Not_A_Name"]), "secrets", "must match"),
        (_tenant(secrets=["a", "a"]), "secrets", "must not repeat"),
    ],
)
def test_build_config_refuses_bad_egress_policy_naming_the_field(tenant, field: str, message: str) -> None:
    # Given a tenant whose egress data is wrong / When the stage config is built
    with pytest.raises(ConfigError) as caught:
        build_config("dev", overrides={"tenants": (tenant,)})
    # Then synth stops with the stage, the tenant and the field named, and the reason
    text = str(caught.value)
    assert text.startswith("stage 'dev' configuration is invalid: tenants[0]")
    assert field in text
    assert re.search(message, text), text


@pytest.mark.parametrize(
    ("egress", "message"),
    [
        (
            {"sessions_cidr": "10.1.0.0/16", "egress_cidr": "10.2.0.0/24"},
            "egress_cidr.*private network of size",
        ),
        ({"sessions_cidr": "10.1.0.0/16", "egress_cidr": "10.1.0.0/20"}, "overlap"),
        ({"sessions_cidr": "8.8.0.0/16"}, "sessions_cidr.*private network"),
        ({"sessions_cidr": "not a network"}, "sessions_cidr.*not an IPv4 network"),
        ({"availability_zone_ids": ["use1-az1"]}, "names 1 zones"),
        ({"availability_zone_ids": ["us-east-1a", "use1-az2"]}, "not an availability zone id"),
        ({"nat_gateways": 3}, "at most one per availability zone"),
        ({"proxy_cpu": 256, "proxy_memory_mib": 4096}, "not a Fargate size"),
        ({"proxy_min_tasks": 3, "proxy_max_tasks": 2}, "above proxy_max_tasks"),
        ({"proxy_port": 80}, "egress.proxy_port"),
    ],
)
def test_build_config_refuses_bad_egress_stage_settings(egress: dict[str, Any], message: str) -> None:
    # Given wrong egress settings / When built / Then a ConfigError naming what to fix
    with pytest.raises(ConfigError, match=message):
        build_config("dev", overrides={"egress": egress})


def test_an_allowlist_environment_needs_the_stage_egress_path() -> None:
    # Given a stage whose egress path is off and a tenant that declares an allowlist environment
    # When built / Then it is refused, naming the tenant's environments
    with pytest.raises(
        ConfigError, match=r"tenants\[0\]\.environments: tenant 'acme' declares 'default-allowlist'"
    ):
        build_config("dev", overrides={"egress": None, "tenants": (_tenant(),)})


def test_a_good_policy_parses_against_the_tenants_secrets() -> None:
    # Given a valid policy with a credential naming the tenant's own secret
    tenant = _tenant(**_policy({"host": "api.example.com", "credential": CREDENTIAL}, packages=["six"]))
    config = build_config("dev", overrides={"tenants": (tenant,)})
    (acme,) = config.tenants
    # Then the initial policy is the parsed one, and an environment without one starts empty
    policy = acme.initial_policy("default-allowlist")
    assert policy.secrets == ("crm-token",) and [str(p) for p in policy.packages] == ["six"]
    assert acme.allowlist_environments == ("default-allowlist",)


def test_dev_gives_acme_the_allowlist_environment_and_template() -> None:
    # Given dev / Then acme has default-allowlist with the `allowlisted` template bound to it
    acme = build_config("dev").tenant("acme")
    assert acme is not None
    assert "default-allowlist" in acme.environments
    assert acme.templates["allowlisted"] == "default-allowlist"
    assert acme.initial_policy("default-allowlist").allow == ()
