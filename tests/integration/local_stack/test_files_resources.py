"""The local stack's artifacts bucket is created from the same definition as the CDK one
(encryption, public access block, lifecycle = audit retention), plus the demo data bucket."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from sandbox_common import naming as n

from infra.cdk.config import build_config
from infra.cdk.constructs.definitions import artifacts_bucket_settings
from infra.local.resources import create_resources
from infra.local.state import LOCAL_ACCOUNT


@pytest.fixture
def local(moto_endpoint: str) -> tuple[Any, Any]:
    def client(service: str) -> Any:
        return boto3.client(service, endpoint_url=moto_endpoint, region_name="us-east-1")

    return create_resources(build_config("local"), client), client("s3")


def test_local_artifacts_bucket_matches_cdk_definition(local) -> None:
    # Given the local stack's resources
    resources, s3 = local
    settings = artifacts_bucket_settings(build_config("local"))
    bucket = resources.artifacts_bucket
    # Then the bucket has the CDK definition's name, encryption, public access block and expiry
    assert bucket == n.artifacts_bucket_name("local", LOCAL_ACCOUNT)
    rule = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert (
        rule["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == settings["sse_algorithm"] == "aws:kms"
    )
    assert (
        s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
        == settings["block_public_access"]
    )
    rules = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert [r["Expiration"]["Days"] for r in rules] == [build_config("local").audit_retention_days]


def test_local_demo_data_bucket_exists_and_is_private(local) -> None:
    resources, s3 = local
    assert resources.data_bucket == n.demo_data_bucket_name("local")
    block = s3.get_public_access_block(Bucket=resources.data_bucket)["PublicAccessBlockConfiguration"]
    assert all(block.values())
