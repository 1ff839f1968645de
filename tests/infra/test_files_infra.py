"""The artifacts bucket and the tenants' data grants, read from synthesized templates."""

from __future__ import annotations

import pytest
from sandbox_common import naming as n

from infra.cdk.config import ConfigError, TenantConfig, TenantData, build_config
from infra.cdk.constructs.definitions import artifacts_bucket_settings
from tests.infra._cfn import (
    allowed_actions,
    as_list,
    policy_statements,
    render,
    resources,
    statement_resources,
)
from tests.infra.conftest import STAGES

KEY_ARN = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
DATA_TENANTS = (
    TenantConfig(
        id="acme",
        templates={"analyst": "default-public"},
        environments=("default-public", "internal-only"),
        data=TenantData(read=("s3://acme-data/in",), write=("s3://acme-data/out/",), kms_keys=(KEY_ARN,)),
    ),
    TenantConfig(
        id="globex", templates={"analyst": "default-public"}, data=TenantData(read=("s3://globex-data/",))
    ),
    TenantConfig(id="initech", templates={"analyst": "default-public"}),
)


def _core(templates):
    return next(v for k, v in templates.items() if k.endswith("-Core"))


def _bucket(template):
    found = [
        r
        for r in resources(template, "AWS::S3::Bucket").values()
        if "artifacts" in render(r["Properties"].get("BucketName", ""))
    ]
    assert len(found) == 1
    return found[0]["Properties"]


@pytest.mark.parametrize("stage", STAGES)
def test_artifacts_bucket_is_kms_private_tls_only_and_expires_with_audit(all_stages, stage: str) -> None:
    # Given the stage's core template
    template = _core(all_stages[stage])
    props = _bucket(template)
    config = build_config(stage)
    # Then SSE-KMS with a customer key, every public access blocked, access logs on
    rule = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
    assert rule["SSEAlgorithm"] == "aws:kms"
    assert "KMSMasterKeyID" in rule
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert "DestinationBucketName" in props["LoggingConfiguration"]
    # And the lifecycle expires objects after exactly the audit retention
    days = [
        r["ExpirationInDays"] for r in props["LifecycleConfiguration"]["Rules"] if "ExpirationInDays" in r
    ]
    assert days == [config.audit_retention_days]
    # And all three are the plain-data definition the local stack creates its bucket from
    settings = artifacts_bucket_settings(config)
    assert rule["SSEAlgorithm"] == settings["sse_algorithm"]
    assert props["PublicAccessBlockConfiguration"] == settings["block_public_access"]
    assert days == [settings["expiration_days"]]
    # And the bucket policy denies every non-TLS request
    policies = resources(template, "AWS::S3::BucketPolicy").values()
    denies = [
        st
        for p in policies
        for st in as_list(p["Properties"]["PolicyDocument"]["Statement"])
        if st["Effect"] == "Deny"
        and st.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
    ]
    assert len(denies) >= 1


def test_dispatch_role_gets_exactly_put_and_get_on_artifacts(all_stages) -> None:
    # Given the dev core template
    template = _core(all_stages["dev"])
    # When the dispatch role's S3 statements are collected
    s3_actions = sorted(
        a
        for owner, st in policy_statements(template)
        if "Dispatch" in owner
        for a in allowed_actions(st)
        if a.startswith("s3:")
    )
    # Then exactly PutObject and GetObject (no List, no Delete)
    assert s3_actions == ["s3:GetObject", "s3:PutObject"]


@pytest.fixture(scope="module")
def data_templates():
    from infra.cdk.app_factory import synth_stage

    return synth_stage("dev", overrides={"tenants": DATA_TENANTS})


def _tenant_statements(templates, tenant_id: str, role_kind: str):
    found = []
    for name, template in templates.items():
        if name.endswith("-Core"):
            continue
        for owner, st in policy_statements(template):
            if owner.startswith(f"Tenant{tenant_id}") and role_kind in owner:
                found.append(st)
    return found


def _s3_grants(statements) -> set[tuple[str, str]]:
    return {
        (a, r)
        for st in statements
        for a in allowed_actions(st)
        if a.startswith("s3:")
        for r in statement_resources(st)
    }


def test_tenant_execution_roles_reach_exactly_their_prefixes(data_templates) -> None:
    # Given tenants with data grants / When their execution roles' statements are read
    acme = _s3_grants(_tenant_statements(data_templates, "acme", "ExecutionRole"))
    globex = _s3_grants(_tenant_statements(data_templates, "globex", "ExecutionRole"))
    initech = _s3_grants(_tenant_statements(data_templates, "initech", "ExecutionRole"))
    # Then each role reaches exactly its own prefixes (both acme environments get the same)
    part = "arn:<AWS::Partition>:s3:::"
    assert acme == {
        ("s3:GetObject", f"{part}acme-data/in/*"),
        ("s3:PutObject", f"{part}acme-data/out/*"),
        ("s3:ListBucket", f"{part}acme-data"),
    }
    assert globex == {("s3:GetObject", f"{part}globex-data/*"), ("s3:ListBucket", f"{part}globex-data")}
    assert initech == set()
    # And listing is limited to the read prefixes
    lists = [
        st
        for st in _tenant_statements(data_templates, "acme", "ExecutionRole")
        if "s3:ListBucket" in allowed_actions(st)
    ]
    assert lists and all(st["Condition"]["StringLike"]["s3:prefix"] == ["in/*"] for st in lists)
    # And KMS only for the named key, only via S3
    kms = [
        st
        for st in _tenant_statements(data_templates, "acme", "ExecutionRole")
        if any(a.startswith("kms:") for a in allowed_actions(st))
    ]
    assert kms and all(statement_resources(st) == [KEY_ARN] for st in kms)
    assert all("kms:ViaService" in str(st["Condition"]) for st in kms)


def test_dispatch_and_runner_roles_cannot_read_tenant_data(data_templates) -> None:
    # Given every identity statement of every stack
    readers = []
    for template in data_templates.values():
        for owner, st in policy_statements(template):
            if "ExecutionRole" in owner:
                continue
            for action in allowed_actions(st):
                for res in statement_resources(st):
                    if action.startswith("s3:") and (
                        "acme-data" in res or "globex-data" in res or res == "*"
                    ):
                        readers.append((owner, action, res))
    # Then no role but the tenants' execution roles names tenant data (or S3 on *)
    assert readers == []
    # And the session-runner role (core stack) holds no S3 action at all
    core = data_templates[n.stack_name("dev", "Core")]
    (runner,) = [
        rid
        for rid, r in core["Resources"].items()
        if r["Type"] == "AWS::IAM::Role" and r["Properties"].get("RoleName") == n.runner_role_name("dev")
    ]
    runner_actions = [
        a for owner, st in policy_statements(core) if owner == runner for a in allowed_actions(st)
    ]
    assert runner_actions and not [a for a in runner_actions if a.startswith("s3:")]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("s3://shared/", "s3://shared/globex/"),
        ("s3://shared/acme", "s3://shared/acme/x/"),
        ("s3://same/p/", "s3://same/p"),
    ],
)
def test_overlapping_prefixes_between_tenants_fail_synth(a: str, b: str) -> None:
    # Given two tenants whose data prefixes overlap / When the stage is built / Then a ConfigError
    tenants = (
        TenantConfig(id="acme", data=TenantData(read=(a,))),
        TenantConfig(id="globex", data=TenantData(write=(b,))),
    )
    with pytest.raises(ConfigError, match="overlap"):
        build_config("dev", {"tenants": tenants})


def test_sibling_prefixes_do_not_overlap() -> None:
    tenants = (
        TenantConfig(id="acme", data=TenantData(read=("s3://shared/acme/",))),
        TenantConfig(id="globex", data=TenantData(read=("s3://shared/acme-2/",))),
    )
    assert len(build_config("dev", {"tenants": tenants}).tenants) == 2


def test_bad_data_prefix_or_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        build_config("dev", {"tenants": [{"id": "acme", "data": {"read": ["acme-data/in"]}}]})


def test_artifacts_bucket_name_is_published_as_output(all_stages) -> None:
    outputs = _core(all_stages["dev"])["Outputs"]
    assert n.OUTPUT_ARTIFACTS_BUCKET in outputs
