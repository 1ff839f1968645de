"""`sandbox_common.aws.session` in a fresh interpreter: every boto3 session of ours shares the
process's botocore data loader, so a cold container builds its clients without parsing botocore's
data files once per client (the test process itself shares one loader for every botocore Session,
tests/support/botocore_models.py, which would hide a session that built its own)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def test_aws_session_two_sessions_of_a_cold_process_parse_the_model_once() -> None:
    # Given a fresh process (nothing loaded yet)
    # When two sessions from aws.session each make a DynamoDB client
    seen = _in_a_fresh_process(_COLD_PROCESS)
    # Then they share one loader, which read the service model and the endpoints once
    assert seen == {"shared": True, "model_reads": 1, "endpoint_reads": 1}


def test_aws_new_client_builds_every_client_of_a_process_from_one_session() -> None:
    # Given a fresh process
    # When it builds three clients (two cached, one with its own keys), then clears the cache and builds one
    seen = _in_a_fresh_process(_ONE_SESSION_PROCESS, AWS_DEFAULT_REGION="us-east-1")
    # Then one session made the three clients, and a cleared cache makes a new one (a fresh container)
    assert seen == {"sessions_for_three_clients": 1, "after_clear": 1}
