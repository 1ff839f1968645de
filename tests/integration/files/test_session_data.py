"""A session reads its tenant's data in the emulated S3 the way a session on AgentCore does (boto3,
default credentials), through its own relay (infra/local/interpreter/s3relay.py): the tenant's
prefix only, reads only, and that one endpoint is the only local port a session reaches."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest

from infra.local.interpreter import LocalInterpreterServer
from infra.local.interpreter.s3relay import MAX_CONNECTIONS, SESSION_PORT, DataGrant
from tests.integration.interpreter._helpers import invoke, make_client

from .conftest import SESSION_PYTHON

BUCKET = "tenant-data"
ACME_PUB, ACME_SBX, GLOBEX_PUB = "sbx_data_acme_pub", "sbx_data_acme_int", "sbx_data_globex_pub"
# The statements tenant_data_statements gives a role that reads s3://tenant-data/acme/
ACME_READ = (
    {
        "Sid": "ReadTenantData",
        "Effect": "Allow",
        "Action": ["s3:GetObject"],
        "Resource": [f"arn:aws:s3:::{BUCKET}/acme/*"],
    },
    {
        "Sid": "ListTenantData0",
        "Effect": "Allow",
        "Action": ["s3:ListBucket"],
        "Resource": [f"arn:aws:s3:::{BUCKET}"],
        "Condition": {"StringLike": {"s3:prefix": ["acme/*"]}},
    },
)


@pytest.fixture(scope="module")
def data_interpreter(moto_server: str) -> Iterator[LocalInterpreterServer]:
    assert SESSION_PYTHON.exists(), "the session runtime is missing: run `make session-runtime`"
    grant = DataGrant(moto_server, ACME_READ)
    server = LocalInterpreterServer(
        interpreters={ACME_PUB: "PUBLIC", ACME_SBX: "SANDBOX", GLOBEX_PUB: "PUBLIC"},
        python=str(SESSION_PYTHON),
        data_grants={ACME_PUB: grant, ACME_SBX: grant},
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture
def bucket(moto_endpoint: str) -> Any:
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key="acme/sales.csv", Body=b"region,amount\neu,3\nus,4\n")
    s3.put_object(Bucket=BUCKET, Key="globex/secret.csv", Body=b"globex-only\n")
    return s3


def run(server: LocalInterpreterServer, interpreter: str, code: str) -> dict[str, Any]:
    """Run `code` in a fresh session of `interpreter`; the JSON it printed last."""
    client = make_client(server.endpoint)
    session_id = client.start_code_interpreter_session(codeInterpreterIdentifier=interpreter)["sessionId"]
    try:
        structured, _, _ = invoke(client, interpreter, session_id, code)
    finally:
        client.stop_code_interpreter_session(codeInterpreterIdentifier=interpreter, sessionId=session_id)
    assert structured.get("exitCode") == 0, structured
    return json.loads(structured["stdout"].strip().splitlines()[-1])


PROBE = f"""
import json, os, socket
import boto3
from botocore.exceptions import ClientError
s3 = boto3.client("s3")
out = {{"endpoint": os.environ.get("AWS_ENDPOINT_URL_S3")}}
def attempt(name, call):
    try:
        out[name] = call()
    except ClientError as exc:
        out[name] = exc.response["Error"]["Code"]
    except Exception as exc:
        out[name] = type(exc).__name__
attempt("own", lambda: s3.get_object(Bucket="{BUCKET}", Key="acme/sales.csv")["Body"].read().decode())
attempt("list", lambda: [o["Key"] for o in s3.list_objects_v2(Bucket="{BUCKET}", Prefix="acme/")["Contents"]])
attempt("other", lambda: s3.get_object(Bucket="{BUCKET}", Key="globex/secret.csv")["Body"].read().decode())
attempt("other_list", lambda: s3.list_objects_v2(Bucket="{BUCKET}", Prefix="globex/").get("Contents"))
attempt("write", lambda: s3.put_object(Bucket="{BUCKET}", Key="acme/new.csv", Body=b"x") and "written")
print(json.dumps(out))
"""


@pytest.mark.parametrize("interpreter", [ACME_PUB, ACME_SBX])
def test_session_reads_its_tenants_prefix_and_nothing_else(
    data_interpreter: LocalInterpreterServer, bucket: Any, interpreter: str
) -> None:
    # Given acme's object and globex's in the emulated S3
    # When code in an acme session (PUBLIC or SANDBOX) uses boto3 with its default credentials
    seen = run(data_interpreter, interpreter, PROBE)
    # Then it reads and lists its own prefix through its relay
    assert seen["endpoint"] == f"http://127.0.0.1:{SESSION_PORT}"
    assert seen["own"] == "region,amount\neu,3\nus,4\n"
    assert seen["list"] == ["acme/sales.csv"]
    # And another tenant's prefix, or a write, is refused as IAM refuses it
    assert seen["other"] == "AccessDenied"
    assert seen["other_list"] == "AccessDenied"
    assert seen["write"] == "AccessDenied"
    assert "Contents" not in bucket.list_objects_v2(Bucket=BUCKET, Prefix="acme/new")


def test_session_reaches_the_relay_and_no_other_local_port(
    data_interpreter: LocalInterpreterServer, bucket: Any
) -> None:
    # Given the emulated S3's and the interpreter's own ports on this host
    ports = {
        "relay": SESSION_PORT,
        "moto": urlsplit(bucket.meta.endpoint_url).port,
        "interpreter": urlsplit(data_interpreter.endpoint).port,
    }
    code = (
        "import json, socket\nout = {}\n"
        f"for name, port in {ports!r}.items():\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', port), timeout=5).close()\n"
        "        out[name] = 'open'\n"
        "    except OSError as exc:\n"
        "        out[name] = type(exc).__name__\n"
        "try:\n"
        f"    socket.create_server(('127.0.0.1', {SESSION_PORT + 1})).close()\n"
        "    out['bind_low_port'] = 'bound'\n"
        "except OSError as exc:\n"
        "    out['bind_low_port'] = type(exc).__name__\n"
        "print(json.dumps(out))\n"
    )
    for interpreter in (ACME_PUB, ACME_SBX):
        # When a session of either network mode connects to each of them on 127.0.0.1
        seen = run(data_interpreter, interpreter, code)
        # Then only its relay answers: the emulated S3 itself and the interpreter stay unreachable
        assert {k: seen[k] for k in ports} == {
            "relay": "open",
            "moto": "ConnectionRefusedError",
            "interpreter": "ConnectionRefusedError",
        }
        # And it cannot listen on a port of the relay's range itself
        assert seen["bind_low_port"] == "PermissionError"


def test_session_of_an_interpreter_without_a_grant_has_no_data_endpoint(
    data_interpreter: LocalInterpreterServer, bucket: Any
) -> None:
    # When code in a globex session (its interpreter has no data grant) looks for one
    code = (
        "import json, os, socket\nout = {'endpoint': os.environ.get('AWS_ENDPOINT_URL_S3')}\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {SESSION_PORT}), timeout=5).close()\n"
        "    out['relay'] = 'open'\n"
        "except OSError as exc:\n"
        "    out['relay'] = type(exc).__name__\n"
        "print(json.dumps(out))\n"
    )
    # Then there is none
    assert run(data_interpreter, GLOBEX_PUB, code) == {"endpoint": None, "relay": "ConnectionRefusedError"}


def test_session_holds_at_most_a_bounded_number_of_relay_connections(
    data_interpreter: LocalInterpreterServer, bucket: Any
) -> None:
    # When a session opens many more connections to its relay than it may hold, then asks on each
    request = f"HEAD /{BUCKET}/acme/sales.csv HTTP/1.1\r\nHost: s3\r\n\r\n".encode()
    code = (
        "import json, socket\n"
        f"conns = [socket.create_connection(('127.0.0.1', {SESSION_PORT}), timeout=20)"
        f" for _ in range({MAX_CONNECTIONS + 8})]\n"
        "served, errors = 0, []\n"
        "for c in conns:\n"
        "    try:\n"
        f"        c.sendall({request!r})\n"
        "        served += c.recv(12).startswith(b'HTTP/1.')\n"
        "    except OSError as exc:\n"
        "        errors.append(repr(exc))\n"
        "for c in conns:\n"
        "    c.close()\n"
        "print(json.dumps({'served': served, 'errors': errors[:3]}))\n"
    )
    seen = run(data_interpreter, ACME_PUB, code)
    # Then only the bounded number were served (one server thread each); the rest were closed
    assert 1 <= seen["served"] <= MAX_CONNECTIONS, seen


def test_unisolated_session_reads_its_tenants_prefix_through_a_relay_on_a_host_port(
    moto_server: str, bucket: Any
) -> None:
    # Given an interpreter run unisolated (SANDBOX_LOCAL_UNISOLATED=1: sessions share the host's network)
    grant = DataGrant(moto_server, ACME_READ)
    with LocalInterpreterServer(
        interpreters={ACME_PUB: "PUBLIC"},
        python=str(SESSION_PYTHON),
        isolation="unisolated",
        data_grants={ACME_PUB: grant},
    ) as server:
        # When its session runs the same probe
        seen = run(server, ACME_PUB, PROBE)
    # Then its relay listens on a free port of the host, and applies the same grant
    assert (
        seen["endpoint"].startswith("http://127.0.0.1:")
        and seen["endpoint"] != f"http://127.0.0.1:{SESSION_PORT}"
    )
    assert seen["own"] == "region,amount\neu,3\nus,4\n"
    assert (seen["other"], seen["write"]) == ("AccessDenied", "AccessDenied")
