"""The local relay's grant (infra/local/interpreter/s3relay.py): the tenant role's own IAM
statements, evaluated for the requests a session's boto3 makes, and nothing else relayed."""

from __future__ import annotations

import pytest
from sandbox_common import naming as n

from infra.cdk.config import build_config
from infra.cdk.constructs.definitions import tenant_data_statements
from infra.local.interpreter.s3relay import Refused, grants_from_json, grants_to_json, permits, target
from infra.local.resources import data_grants

BUCKET = n.demo_data_bucket_name("local")


def acme_statements() -> list[dict]:
    (acme,) = [t for t in build_config("local").tenants if t.id == "acme"]
    return tenant_data_statements(acme)


def allowed(method: str, path: str) -> bool:
    wanted = target(method, path)
    return permits(acme_statements(), wanted.action, wanted.resource, wanted.context)


def test_permits_reads_and_lists_under_the_tenants_prefix() -> None:
    assert allowed("GET", f"/{BUCKET}/acme/sales.csv")
    assert allowed("HEAD", f"/{BUCKET}/acme/2026/q1%20sales.csv")
    assert allowed("GET", f"/{BUCKET}?list-type=2&prefix=acme%2F2026%2F")


@pytest.mark.parametrize(
    "path",
    [
        f"/{BUCKET}/globex/sales.csv",
        f"/{BUCKET}/acmeX/sales.csv",  # a sibling folder whose name starts like the prefix
        "/other-bucket/acme/sales.csv",
        f"/{BUCKET}?list-type=2&prefix=globex%2F",
        f"/{BUCKET}?list-type=2",  # the whole bucket
    ],
)
def test_permits_nothing_outside_the_tenants_prefix(path: str) -> None:
    assert not allowed("GET", path)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", f"/{BUCKET}/acme/x.csv"),
        ("DELETE", f"/{BUCKET}/acme/x.csv"),
        ("POST", f"/{BUCKET}?delete"),
        ("GET", f"/{BUCKET}/acme/../globex/sales.csv"),
        ("GET", f"/{BUCKET}/acme/%2e%2e/globex/sales.csv"),
        ("GET", f"/{BUCKET}/acme/%EF%BC%8E%EF%BC%8E/globex/sales.csv"),  # fullwidth dots
        ("GET", f"/{BUCKET}/acme/a%0Ab.csv"),
        ("GET", f"/{BUCKET}/acme/x.csv?acl"),
        ("GET", f"/{BUCKET}/acme/x.csv?versionId=1"),
        ("GET", f"/{BUCKET}?list-type=2&prefix=acme/&prefix=globex/"),
        ("GET", f"/{BUCKET}?list-type=1&prefix=acme/"),
        ("GET", f"http://127.0.0.1:1/{BUCKET}/acme/x.csv"),
        ("GET", f"/{BUCKET}/acme/%ff.csv"),
    ],
)
def test_target_refuses_what_the_relay_does_not_carry(method: str, path: str) -> None:
    with pytest.raises(Refused):
        target(method, path)


def test_target_reencodes_the_key_it_checked() -> None:
    # The path moto gets is built from the decoded, checked bucket and key
    wanted = target("GET", f"/{BUCKET}/acme/q1%20sales.csv")
    assert wanted.upstream_path == f"/{BUCKET}/acme/q1%20sales.csv"
    assert wanted.resource == f"arn:aws:s3:::{BUCKET}/acme/q1 sales.csv"


def test_permits_iam_wildcards_only() -> None:
    # Given a statement whose prefix has regex-special characters
    statements = [{"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["arn:aws:s3:::b/a.b+/*"]}]
    # Then they match themselves only
    assert permits(statements, "s3:GetObject", "arn:aws:s3:::b/a.b+/x", {})
    assert not permits(statements, "s3:GetObject", "arn:aws:s3:::b/aXbb/x", {})


def test_permits_an_explicit_deny_wins_and_unknown_conditions_do_not_apply() -> None:
    allow = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}
    deny = {"Effect": "Deny", "Action": "s3:*", "Resource": "arn:aws:s3:::b/secret/*"}
    odd = {**allow, "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}}
    assert permits([allow, deny], "s3:GetObject", "arn:aws:s3:::b/x", {})
    assert not permits([allow, deny], "s3:GetObject", "arn:aws:s3:::b/secret/x", {})
    assert not permits([odd], "s3:GetObject", "arn:aws:s3:::b/x", {})


def test_data_grants_are_the_roles_statements_for_each_interpreter_of_the_tenant() -> None:
    # Given the local stage (acme reads its folder of the demo bucket; globex reads nothing)
    config = build_config("local")
    grants = data_grants(config, "http://127.0.0.1:5000")
    # Then each of acme's interpreters has the role's statements, nobody else has a grant
    acme = config.tenant("acme")
    assert acme is not None and "default-allowlist" in acme.environments  # VPC sessions read it too
    acme_ids = {n.interpreter_name("local", "acme", e) for e in acme.environments}
    assert set(grants) == acme_ids
    assert all(list(g.statements) == acme_statements() for g in grants.values())
    # And the file the stack hands the interpreter reads back the same
    assert grants_from_json(grants_to_json(grants)) == grants
