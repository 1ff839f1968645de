"""Background jobs in the synthesized stages: the reaper's job sweep holds exactly what
it calls — the jobs table and its by_open index, append-only audit rows, the audit DLQ, the
session-runner role with the tenant session tag — and gets the environment that names them."""

from __future__ import annotations

import pytest
from sandbox_common import naming as n

from infra.cdk.config import STAGES
from tests.infra._cfn import allowed_actions, policy_statements, resources, statement_resources


def _reaper(all_stages, stage: str) -> tuple[dict, str, dict]:
    core = all_stages[stage][n.stack_name(stage, "Core")]
    (role_id,) = [
        rid
        for rid, r in resources(core, "AWS::IAM::Role").items()
        if r["Properties"].get("RoleName") == n.function_role_name(stage, n.REAPER)
    ]
    (fn,) = [
        r
        for r in resources(core, "AWS::Lambda::Function").values()
        if r["Properties"]["FunctionName"] == n.function_name(stage, n.REAPER)
    ]
    return core, role_id, fn


def _table_id(core: dict, spec: n.TableSpec, stage: str) -> str:
    return next(
        rid
        for rid, r in resources(core, "AWS::DynamoDB::Table").items()
        if r["Properties"]["TableName"] == spec.physical(stage)
    )


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_reaper_role_holds_exactly_the_job_sweeps_calls(all_stages, stage: str) -> None:
    # Given the reaper's role
    core, role_id, _ = _reaper(all_stages, stage)
    statements = [st for owner, st in policy_statements(core) if owner == role_id]
    jobs_arn = f"<{_table_id(core, n.JOBS, stage)}.Arn>"
    audit_arn = f"<{_table_id(core, n.INVOCATIONS, stage)}.Arn>"

    def actions_on(arn: str) -> set[str]:
        return {a for st in statements if arn in statement_resources(st) for a in allowed_actions(st)}

    # Then on the jobs table: read, conditional end (Update transactions) and the by_open query
    assert actions_on(jobs_arn) == {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query"}
    assert actions_on(f"{jobs_arn}/index/{n.JOBS_BY_OPEN.name}") == {
        "dynamodb:GetItem",
        "dynamodb:UpdateItem",
        "dynamodb:Query",
    }
    # And on the audit table only the append-only PutItem (the writer sends attribute_not_exists)
    assert actions_on(audit_arn) == {"dynamodb:PutItem"}
    # And a row that cannot be written goes to the audit DLQ
    dlq_id = next(
        rid
        for rid, r in resources(core, "AWS::SQS::Queue").items()
        if r["Properties"]["QueueName"] == n.audit_dlq_name(stage)
    )
    assert actions_on(f"<{dlq_id}.Arn>") == {"sqs:SendMessage"}
    # And it may tag its runner-role sessions with the tenant, as the runner's AssumeRole does
    assume = [st for st in statements if "sts:AssumeRole" in allowed_actions(st)]
    assert len(assume) == 1
    assert set(allowed_actions(assume[0])) == {"sts:AssumeRole", "sts:TagSession"}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_reaper_role_reads_only_the_tenant_policy_items_of_the_tenants_table(all_stages, stage: str) -> None:
    # Given the reaper's role (the kill switch reads a tenant's policy item)
    core, role_id, _ = _reaper(all_stages, stage)
    statements = [st for owner, st in policy_statements(core) if owner == role_id]
    tenants_arn = f"<{_table_id(core, n.TENANTS, stage)}.Arn>"
    # Then on the tenants table it may read an item by key, and nothing more
    granted = {a for st in statements if tenants_arn in statement_resources(st) for a in allowed_actions(st)}
    assert granted == {"dynamodb:GetItem"}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_reaper_environment_names_jobs_and_audit(all_stages, stage: str) -> None:
    # Given the reaper function
    core, _, fn = _reaper(all_stages, stage)
    env = fn["Properties"]["Environment"]["Variables"]
    # Then its environment names the jobs and audit tables and the audit DLQ
    assert env[n.ENV_JOBS_TABLE] == {"Ref": _table_id(core, n.JOBS, stage)}
    assert env[n.ENV_INVOCATIONS_TABLE] == {"Ref": _table_id(core, n.INVOCATIONS, stage)}
    assert env[n.ENV_AUDIT_DLQ_URL] != ""


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_reaper_may_only_put_artifacts_of_jobs_it_ends_and_knows_the_bucket(all_stages, stage: str) -> None:
    # Given the reaper (it stores the files of a background job whose end it observes)
    core, role_id, fn = _reaper(all_stages, stage)
    statements = [st for owner, st in policy_statements(core) if owner == role_id]
    (bucket_id,) = [
        rid
        for rid, r in resources(core, "AWS::S3::Bucket").items()
        if "BucketEncryption" in r["Properties"]
        and r["Properties"].get("BucketName", {}) != {}
        and "LoggingConfiguration" in r["Properties"]
    ]
    on_objects = {
        a
        for st in statements
        for a in allowed_actions(st)
        if any(f"<{bucket_id}.Arn>" in r for r in statement_resources(st))
    }
    # Then it may put objects of the artifacts bucket and nothing else there (no Get, List, Delete)
    assert on_objects == {"s3:PutObject"}
    # And use the bucket's key to encrypt only
    key_actions = {a for st in statements for a in allowed_actions(st) if a.startswith("kms:")}
    assert key_actions == {"kms:Encrypt", "kms:GenerateDataKey"}
    # And its environment names the bucket
    assert fn["Properties"]["Environment"]["Variables"][n.ENV_ARTIFACTS_BUCKET] == {"Ref": bucket_id}
