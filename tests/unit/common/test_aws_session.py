"""`sandbox_common.aws.session`: every boto3 session of ours shares the process's botocore data
loader, so a cold container builds its clients without parsing botocore's data files once per
client."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import botocore.loaders
from sandbox_common import aws


def test_aws_session_search_path_stays_one_sessions_path() -> None:
    # Given a cold session's search path (botocore's own plus boto3's data directory)
    expected = [*botocore.loaders.create_loader().search_paths, str(Path(boto3.__file__).parent / "data")]
    # When many sessions append boto3's data directory to the shared loader
    for _ in range(5):
        aws.session()
    paths = aws.session()._session.get_component("data_loader").search_paths
    # Then each directory is on it once, in one session's order
    assert list(paths) == expected


def test_aws_session_clients_keep_their_own_endpoint_credentials_and_hooks(moto_endpoint: str) -> None:
    # Given two clients of one service from two sessions, one pointed elsewhere with other keys
    seen: list[str] = []
    local = aws.session(region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b").client(
        "sqs", endpoint_url=moto_endpoint
    )
    other = aws.session(region_name="us-east-1", aws_access_key_id="c", aws_secret_access_key="d").client(
        "sqs", endpoint_url="http://127.0.0.1:9"
    )
    local.meta.events.register("before-send", lambda request, **_: seen.append(request.url))
    # When the first one calls moto
    local.create_queue(QueueName="q1")
    # Then only its hook saw the call, and the other keeps its own endpoint and credentials
    assert seen and all(url.startswith(moto_endpoint) for url in seen)
    assert other.meta.endpoint_url == "http://127.0.0.1:9"
    assert other._request_signer._credentials.access_key == "c"


def test_aws_new_client_keeps_each_clients_own_endpoint_and_credentials(moto_endpoint: str) -> None:
    # Given two clients of one service from the shared session, one pointed elsewhere with other keys
    local = aws.new_client(
        "sqs",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="a",
        aws_secret_access_key="b",
    )
    other = aws.new_client(
        "sqs",
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id="c",
        aws_secret_access_key="d",
    )
    # When the first one calls moto
    local.create_queue(QueueName="q-shared-session")
    # Then each keeps its own endpoint and credentials
    assert local.meta.endpoint_url == moto_endpoint and other.meta.endpoint_url == "http://127.0.0.1:9"
    assert local._request_signer._credentials.access_key == "a"
    assert other._request_signer._credentials.access_key == "c"


def test_shared_session_is_made_once_and_builds_one_client_at_a_time(monkeypatch: Any) -> None:
    # Given a SharedSession whose boto3 session records how many client builds overlap
    made: list[Any] = []
    inside, most = [0], [0]
    guard = threading.Lock()

    class Recording:
        def __init__(self, real: Any) -> None:
            self.real = real

        def client(self, service: str, **kwargs: Any) -> Any:
            with guard:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.05)  # long enough that unguarded builds would overlap
            try:
                return self.real.client(service, **kwargs)
            finally:
                with guard:
                    inside[0] -= 1

    real_session = aws.session
    monkeypatch.setattr(aws, "session", lambda: made.append(1) or Recording(real_session()))
    shared = aws.SharedSession()
    start = threading.Barrier(8)

    def build() -> Any:
        start.wait()
        return shared.client("sqs", region_name="us-east-1", endpoint_url="http://127.0.0.1:9")

    # When eight threads build a client at the same moment
    with ThreadPoolExecutor(8) as pool:
        clients = list(pool.map(lambda _: build(), range(8)))
    # Then one session built all eight, one at a time
    assert len(made) == 1 and most[0] == 1
    assert len({id(c) for c in clients}) == 8
