"""The egress policy as data: what it allows, and every shape it refuses with the field named."""

from __future__ import annotations

import pytest
from sandbox_common import egress_policy as ep

CRM = {"header": "Authorization", "template": "Bearer {secret:crm-token}"}


def test_policy_round_trips_and_matches_hosts_suffixes_and_ports():
    # Given a policy with an exact host (with a credential), a suffix and a non-default port
    policy = ep.parse_policy(
        {
            "allow": [
                {"host": "API.Example.com.", "credential": CRM},
                "*.example.org",
                {"host": "files.test", "ports": [8443]},
            ],
            "packages": ["Tabulate==0.9.0", "six"],
        },
        secrets={"crm-token"},
    )
    # Then hosts are normalized, the default port is 443, and the JSON form round-trips
    assert policy.as_dict()["allow"][0] == {"host": "api.example.com", "ports": [443], "credential": CRM}
    assert ep.parse_policy(policy.to_json(), secrets={"crm-token"}) == policy
    # And matching follows host, suffix and port
    assert policy.rule_for("api.example.com", 443).credential.secrets == ("crm-token",)
    assert policy.rule_for("a.b.example.org", 443) is not None
    assert policy.rule_for("example.org", 443) is None  # a suffix is its subdomains only
    assert policy.rule_for("evilexample.org", 443) is None
    assert policy.rule_for("api.example.com", 8443) is None
    assert policy.rule_for("files.test", 8443) is not None
    assert policy.package("tabulate") == ep.Package("tabulate", "0.9.0")
    assert policy.package("SIX") == ep.Package("six")
    assert policy.package("requests") is None
    assert (
        policy.rule_for("api.example.com", 443).credential.render({"crm-token": "s3cr3t"}) == "Bearer s3cr3t"
    )


def test_closed_policy_allows_nothing():
    assert ep.CLOSED.rule_for("api.example.com", 443) is None
    assert ep.CLOSED.package("six") is None
    assert ep.parse_policy({"egress": "none"}) == ep.CLOSED


@pytest.mark.parametrize(
    ("policy", "field", "says"),
    [
        ({"allow": ["*"]}, "allow[0].host", "bare *"),
        ({"allow": ["*.com"]}, "allow[0].host", "top-level domain"),
        ({"allow": ["10.0.0.1"]}, "allow[0].host", "IP address"),
        ({"allow": ["169.254.169.254"]}, "allow[0].host", "IP address"),
        ({"allow": ["2130706433"]}, "allow[0].host", "IP address"),  # decimal
        ({"allow": ["0177.0.0.1"]}, "allow[0].host", "IP address"),  # octal
        ({"allow": ["0x7f.0.0.1"]}, "allow[0].host", "IP address"),  # hex
        ({"allow": ["[::1]"]}, "allow[0].host", "IP address"),
        ({"allow": ["fd00::1"]}, "allow[0].host", "IP address"),
        ({"allow": ["allowed.com@evil.com"]}, "allow[0].host", "not a host name"),
        ({"allow": ["a.com:8443"]}, "allow[0].host", "not a host name"),
        ({"allow": ["localhost"]}, "allow[0].host", "needs a domain"),
        ({"allow": ["a.*.com"]}, "allow[0].host", "leading"),
        ({"allow": ["a.com", "A.com"]}, "allow[1].host", "twice"),
        ({"allow": [{"host": "a.com", "ports": [0]}]}, "allow[0].ports[0]", "1 to 65535"),
        ({"allow": [{"host": "a.com", "ports": [80], "credential": CRM}]}, "allow[0].credential", "HTTPS"),
        (
            {"allow": [{"host": "a.com", "credential": {"header": "X", "template": "{secret:globex/crm}"}}]},
            "allow[0].credential.template",
            "must match",
        ),
        (
            {"allow": [{"host": "a.com", "credential": {"header": "X", "template": "{secret:other}"}}]},
            "allow[0].credential.template",
            "not one of the tenant's secrets",
        ),
        (
            {
                "allow": [
                    {"host": "a.com", "credential": {"header": "Host", "template": "{secret:crm-token}"}}
                ]
            },
            "allow[0].credential.header",
            "set by the proxy",
        ),
        (
            {"allow": [{"host": "a.com", "credential": {"header": "X", "template": "plain"}}]},
            "allow[0].credential.template",
            "names no secret",
        ),
        (
            {
                "allow": [
                    {"host": "a.com", "credential": {"header": "X", "template": "a\r\nB: {secret:crm-token}"}}
                ]
            },
            "allow[0].credential.template",
            "one line",
        ),
        ({"egress": "public"}, "egress", "one of"),
        ({"egress": "none", "allow": ["a.com"]}, "egress", "allows nothing"),
        ({"packages": ["evil; rm -rf"]}, "packages[0]", "NAME"),
        ({"packages": ["six", "Six"]}, "packages[1]", "twice"),
        ({"allowed": []}, "allowed", "unknown field"),
        ("not json", "policy", "JSON"),
    ],
)
def test_policy_refuses_with_the_field_named(policy, field, says):
    with pytest.raises(ep.PolicyError) as refused:
        ep.parse_policy(policy, secrets={"crm-token"})
    assert refused.value.field == field
    assert says in refused.value.reason


def test_command_line_allow_entries_merge_ports_per_host():
    assert ep.merge_allow_specs(["a.com", "A.com:8443", "b.org:444"]) == [
        {"host": "a.com", "ports": [443, 8443]},
        {"host": "b.org", "ports": [444]},
    ]
    with pytest.raises(ep.PolicyError, match="port after"):
        ep.merge_allow_specs(["a.com:https"])
