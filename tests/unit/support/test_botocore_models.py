"""The test suite's shared botocore loader (tests/support/botocore_models.py)."""

from __future__ import annotations

import boto3
import botocore.session
from sandbox_common import aws

from tests.support import botocore_models


def test_shared_loader_plain_sessions_get_the_process_loader() -> None:
    # Given the suite's conftest installed the shared loader
    # When plain boto3 Sessions (not made by our code) each make a client
    first = boto3.session.Session()
    first.client("dynamodb", region_name="us-east-1")
    second = boto3.session.Session()
    # Then both use the loader our own sessions use, which cached the model
    assert botocore.session.create_loader is botocore_models.shared_create_loader
    loader = first._session.get_component("data_loader")
    assert loader is second._session.get_component("data_loader") is aws.shared_data_loader()
    assert any(key[0] == "load_service_model" and "dynamodb" in key for key in loader._cache)


def test_shared_loader_an_aws_data_path_gets_a_loader_of_its_own(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Given AWS_DATA_PATH naming another directory
    # When botocore builds a loader for it
    loader = botocore_models.shared_create_loader(str(tmp_path))
    # Then it is not the shared one, and searches that directory
    assert loader is not aws.shared_data_loader()
    assert str(tmp_path) in loader.search_paths
