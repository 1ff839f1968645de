"""`sandboxctl egress set`'s command line turned into a policy document (before it is validated)."""

from __future__ import annotations

import pytest
from sandbox_common.egress_policy import PolicyError, parse_policy

from infra.sandboxctl.egress_ops import build_policy


def test_build_policy_attaches_credentials_to_their_hosts_and_merges_ports() -> None:
    document = build_policy(
        ["api.example.com", "API.example.com:8443", "*.example.org"],
        ["api.example.com=Authorization:Bearer {secret:crm-token}"],
        ["six==1.16.0"],
        closed=False,
    )
    assert document["allow"][0] == {
        "host": "api.example.com",
        "ports": [443, 8443],
        "credential": {"header": "Authorization", "template": "Bearer {secret:crm-token}"},
    }
    assert parse_policy(document, secrets={"crm-token"}).packages[0].version == "1.16.0"


@pytest.mark.parametrize(
    ("allow", "credentials", "field"),
    [
        (["a.example.com"], ["b.example.com=X:{secret:s}"], "credential[0]"),
        (["a.example.com"], ["a.example.com"], "credential[0]"),
        (["a.example.com"], ["a.example.com=X:{secret:s}", "a.example.com=Y:{secret:s}"], "credential[1]"),
        (["a.example.com:https"], [], "allow[0]"),
    ],
)
def test_build_policy_names_the_field_of_a_bad_entry(
    allow: list[str], credentials: list[str], field: str
) -> None:
    with pytest.raises(PolicyError) as refused:
        build_policy(allow, credentials, [], closed=False)
    assert refused.value.field == field


def test_build_policy_none_allows_nothing() -> None:
    assert build_policy([], [], [], closed=True) == {"egress": "none", "allow": [], "packages": []}
    with pytest.raises(PolicyError):
        build_policy(["a.example.com"], [], [], closed=True)
