"""`sandbox_common.aws.session`: every boto3 session of ours shares the process's botocore data
loader, so a cold container builds its clients without parsing botocore's data files once per
client."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import botocore.loaders
from sandbox_common import aws

ROOT = Path(__file__).resolve().parents[3]


def _in_a_fresh_process(source: str, **env: str) -> Any:
    """What `source` prints as JSON, run in a new interpreter with only the common layer on its path."""
    out = subprocess.run(
        [sys.executable, "-c", source],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "layers/common/python"), "PATH": "/usr/bin:/bin", **env},
        check=True,
    )
    return json.loads(out.stdout)


# Run in a fresh interpreter: the test process hands every botocore Session the shared loader
# (tests/support/botocore_models.py), which would hide a session of ours that built its own.
_COLD_PROCESS = """
import json
import botocore.loaders
from sandbox_common import aws

reads = []
original = botocore.loaders.JSONFileLoader.load_file
def counted(self, file_path):
    reads.append(str(file_path))
    return original(self, file_path)
botocore.loaders.JSONFileLoader.load_file = counted

first, second = aws.session(region_name="us-east-1"), aws.session(region_name="us-east-1")
first.client("dynamodb")
second.client("dynamodb")
loader = first._session.get_component("data_loader")
print(json.dumps({
    "shared": second._session.get_component("data_loader") is loader,
    "model_reads": sum(path.endswith("/dynamodb/2012-08-10/service-2") for path in reads),
    "endpoint_reads": sum(path.endswith("endpoints") for path in reads),
}))
"""


def test_aws_session_two_sessions_of_a_cold_process_parse_the_model_once() -> None:
    # Given a fresh process (nothing loaded yet)
    # When two sessions from aws.session each make a DynamoDB client
    seen = _in_a_fresh_process(_COLD_PROCESS)
    # Then they share one loader, which read the service model and the endpoints once
    assert seen == {"shared": True, "model_reads": 1, "endpoint_reads": 1}


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


_ONE_SESSION_PROCESS = """
import json
import botocore.session
from sandbox_common import aws

made = []
original = botocore.session.Session.__init__
def counted(self, *args, **kwargs):
    made.append(1)
    original(self, *args, **kwargs)
botocore.session.Session.__init__ = counted

aws.client("dynamodb")
aws.client("ssm")
aws.new_client("sqs", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b")
after_three = len(made)
aws.clear_clients()
aws.client("dynamodb")
print(json.dumps({"sessions_for_three_clients": after_three, "after_clear": len(made) - after_three}))
"""


def test_aws_new_client_builds_every_client_of_a_process_from_one_session() -> None:
    # Given a fresh process
    # When it builds three clients (two cached, one with its own keys), then clears the cache and builds one
    seen = _in_a_fresh_process(_ONE_SESSION_PROCESS, AWS_DEFAULT_REGION="us-east-1")
    # Then one session made the three clients, and a cleared cache makes a new one (a fresh container)
    assert seen == {"sessions_for_three_clients": 1, "after_clear": 1}


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
