"""The test suite's shared botocore loader (tests/support/botocore_models.py)."""

from __future__ import annotations

import boto3
import botocore.loaders
import botocore.session

from tests.support import botocore_models


def test_shared_loader_two_sessions_read_the_model_files_once() -> None:
    # Given the suite's conftest installed the shared loader
    # When two independent boto3 Sessions each make a client
    first = boto3.session.Session()
    first.client("dynamodb", region_name="us-east-1")
    second = boto3.session.Session()
    second.client("dynamodb", region_name="us-east-1")
    # Then both use one loader, so the second client found its model in that loader's cache
    assert botocore.session.create_loader is botocore_models.shared_create_loader
    loader = first._session.get_component("data_loader")
    assert second._session.get_component("data_loader") is loader
    assert any(key[0] == "load_service_model" and "dynamodb" in key for key in loader._cache)


def test_shared_loader_search_path_stays_one_sessions_path() -> None:
    # Given a cold loader's search path plus boto3's data directory (what one Session sees)
    expected = [*botocore.loaders.create_loader()._search_paths]
    # When many Sessions append boto3's data directory to the shared loader
    for _ in range(5):
        boto3.session.Session()
    paths = boto3.session.Session()._session.get_component("data_loader").search_paths
    # Then each directory is on it once, in one Session's order
    assert paths[: len(expected)] == expected
    assert len(paths) == len(set(paths)) == len(expected) + 1


def test_shared_loader_clients_keep_their_own_endpoint_and_hooks(moto_endpoint: str) -> None:
    # Given two clients of the same service from two Sessions, one pointed elsewhere
    seen: list[str] = []
    local = boto3.session.Session().client("sqs", region_name="us-east-1", endpoint_url=moto_endpoint)
    other = boto3.session.Session().client("sqs", region_name="us-east-1", endpoint_url="http://127.0.0.1:9")
    local.meta.events.register("before-send", lambda request, **_: seen.append(request.url))
    # When the first one calls moto
    local.create_queue(QueueName="q1")
    # Then only its hook saw the call, and the other keeps its own endpoint
    assert seen and all(url.startswith(moto_endpoint) for url in seen)
    assert other.meta.endpoint_url == "http://127.0.0.1:9"
