"""The moto snapshot the `stack` fixture restores (tests/support/moto_snapshot.py): a reset server
with the snapshot put back answers exactly as the server did when it was taken, and no write made
after a restore survives the next reset + restore."""

from __future__ import annotations

import datetime
import urllib.request
from typing import Any

from moto.backends import get_backend
from sandbox_common import aws

from infra.cdk.config import build_config
from infra.local.resources import create_resources
from infra.local.state import LocalResources
from tests.support.moto_snapshot import MotoSnapshot
from tests.support.stack import STAGE_SERVICES


def _plain(value: Any) -> Any:
    """Response data without its request metadata (request ids differ per call)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "ResponseMetadata"}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return value


def _described(resources: LocalResources) -> dict[str, Any]:
    """Everything create_resources made, as the AWS APIs describe it, with the data in it."""
    ddb, ssm, iam, sqs, sns, logs, s3 = (aws.client(s) for s in STAGE_SERVICES)
    out: dict[str, Any] = {"tables": ddb.list_tables()["TableNames"]}
    for table in resources.tables.values():
        out[table] = {
            "table": ddb.describe_table(TableName=table)["Table"],
            "ttl": ddb.describe_time_to_live(TableName=table)["TimeToLiveDescription"],
            "pitr": ddb.describe_continuous_backups(TableName=table)["ContinuousBackupsDescription"],
            "items": ddb.scan(TableName=table)["Items"],
        }
    out["parameters"] = ssm.get_parameters_by_path(Path="/", Recursive=True)["Parameters"]
    out["roles"] = iam.list_roles()["Roles"]
    out["role_policies"] = {
        r["RoleName"]: iam.get_role_policy(RoleName=r["RoleName"], PolicyName="StageInterpreters")[
            "PolicyDocument"
        ]
        for r in out["roles"]
    }
    out["queue"] = sqs.get_queue_attributes(QueueUrl=resources.audit_dlq_url, AttributeNames=["All"])[
        "Attributes"
    ]
    out["messages"] = sqs.receive_message(QueueUrl=resources.audit_dlq_url).get("Messages", [])
    out["topics"] = sns.list_topics()["Topics"]
    out["log_groups"] = logs.describe_log_groups()["logGroups"]
    out["buckets"] = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    for bucket in out["buckets"]:
        out[bucket] = {
            "public_access": s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"],
            "objects": s3.list_objects_v2(Bucket=bucket).get("Contents", []),
        }
    # moto's own record of bucket owners, outside the S3 backends (the snapshot restores it too)
    out["bucket_owners"] = {b: get_backend("s3").bucket_accounts.get(b) for b in out["buckets"]}  # type: ignore[attr-defined]
    out["artifacts"] = {
        "encryption": s3.get_bucket_encryption(Bucket=resources.artifacts_bucket),
        "lifecycle": s3.get_bucket_lifecycle_configuration(Bucket=resources.artifacts_bucket)["Rules"],
    }
    return _plain(out)


def _reset(endpoint: str) -> None:
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")).read()


def _write_to_everything(resources: LocalResources) -> None:
    ddb, ssm, _iam, sqs, _sns, logs, s3 = (aws.client(s) for s in STAGE_SERVICES)
    for table in resources.tables.values():
        keys = ddb.describe_table(TableName=table)["Table"]["KeySchema"]
        ddb.put_item(TableName=table, Item={k["AttributeName"]: {"S": "written-after"} for k in keys})
    name = ssm.get_parameters_by_path(Path="/", Recursive=True)["Parameters"][0]["Name"]
    ssm.put_parameter(Name=name, Value="overwritten", Type="String", Overwrite=True)
    ssm.put_parameter(Name="/written/after", Value="x", Type="String")
    sqs.send_message(QueueUrl=resources.audit_dlq_url, MessageBody="written-after")
    s3.put_object(Bucket=resources.artifacts_bucket, Key="written-after", Body=b"x")
    logs.create_log_group(logGroupName="/written/after")


def test_restored_snapshot_answers_as_the_server_it_was_taken_from(moto_endpoint: str) -> None:
    # Given the local stage's resources freshly created in a reset moto server, and a snapshot
    resources = create_resources(build_config("local"), aws.client)
    fresh = _described(resources)
    snapshot = MotoSnapshot.take(STAGE_SERVICES)
    assert len(fresh["tables"]) == len(resources.tables) > 0
    assert fresh["parameters"] and fresh["roles"] and fresh["log_groups"] and fresh["buckets"]

    # When the server is reset (empty) and the snapshot restored
    _reset(moto_endpoint)
    assert aws.client("dynamodb").list_tables()["TableNames"] == []
    snapshot.restore()
    # Then every resource answers as freshly created
    assert _described(resources) == fresh


def test_writes_after_a_restore_do_not_survive_the_next_restore(moto_endpoint: str) -> None:
    # Given a snapshot of the freshly created stage, restored once
    resources = create_resources(build_config("local"), aws.client)
    fresh = _described(resources)
    snapshot = MotoSnapshot.take(STAGE_SERVICES)
    _reset(moto_endpoint)
    snapshot.restore()
    # When a test writes to every table, a parameter, the queue, a bucket and the log groups
    _write_to_everything(resources)
    written = _described(resources)
    assert all(written[t]["items"] for t in resources.tables.values())
    assert written[resources.artifacts_bucket]["objects"] and written["messages"]
    # Then after the next reset + restore none of it is there: the stage is as first created
    _reset(moto_endpoint)
    snapshot.restore()
    assert _described(resources) == fresh
    # And the first restore's writes did not reach the snapshot (each restore is its own copy)
    _write_to_everything(resources)
    _reset(moto_endpoint)
    snapshot.restore()
    assert _described(resources) == fresh
