"""The egress path's deploy-time custom resource (functions/egress_setup) against a real moto
server: the proxy CA made once into its two secrets, the S3 prefix list found, and exactly one
answer to CloudFormation for every request, also when something fails."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from egress_setup import handler as handler_module
from egress_setup import resources
from egress_setup.ca import CLOCK_SKEW, is_ca_certificate, make_ca
from egress_setup.cfn_response import FAILED, SUCCESS

PLACEHOLDER = "not yet written"


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    resources._client.cache_clear()
    yield
    resources._client.cache_clear()


@pytest.fixture
def ca_secrets(moto_endpoint: str) -> dict[str, str]:
    sm = boto3.client("secretsmanager")
    return {
        "CertSecretArn": sm.create_secret(Name="thinkwork/test/egress/ca-cert", SecretString=PLACEHOLDER)[
            "ARN"
        ],
        "KeySecretArn": sm.create_secret(Name="thinkwork/test/egress/ca-key", SecretString=PLACEHOLDER)[
            "ARN"
        ],
    }


def ca_event(props: dict[str, str], request: str = "Create", **extra: Any) -> dict[str, Any]:
    return {
        "RequestType": request,
        "ResourceType": resources.CA_RESOURCE,
        "LogicalResourceId": "EgressSetupCa",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/Sandbox-test-Core/x",
        "RequestId": "req-1",
        "ResponseURL": "http://127.0.0.1:1/unused",
        "ResourceProperties": {
            "CommonName": "Thinkwork sandbox egress CA (test)",
            "ValidityDays": "30",
            **props,
        },
        **extra,
    }


def secret(arn: str) -> str:
    return boto3.client("secretsmanager").get_secret_value(SecretId=arn)["SecretString"]


def leaf_signed_by(ca_cert: x509.Certificate, ca_key: rsa.RSAPrivateKey, host: str) -> x509.Certificate:
    """What the proxy does for every intercepted host: a server certificate signed by the CA key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


# --- the CA -----------------------------------------------------------------------------------
def test_make_ca_is_a_self_signed_ca_that_signs_server_certificates() -> None:
    # Given a CA made for 30 days
    now = dt.datetime(2026, 11, 21, tzinfo=dt.UTC)
    pair = make_ca("Thinkwork sandbox egress CA (test)", 30, now=now)
    cert = x509.load_pem_x509_certificate(pair.cert_pem.encode())
    key = serialization.load_pem_private_key(pair.key_pem.encode(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    # Then it is a CA that may sign server certificates and nothing below them
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign and not usage.key_encipherment
    assert (
        ExtendedKeyUsageOID.SERVER_AUTH
        in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    )
    # And it is self-signed by the key written beside it, valid from a day early for 30 days
    assert cert.issuer == cert.subject
    cert.verify_directly_issued_by(cert)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()
    assert cert.not_valid_before_utc == now - CLOCK_SKEW
    assert cert.not_valid_after_utc == now + dt.timedelta(days=30)
    # And a server certificate the proxy signs with that key verifies against it
    leaf = leaf_signed_by(cert, key, "api.example.com")
    leaf.verify_directly_issued_by(cert)
    # And the key is PKCS#8 without a passphrase (the secret is the protection)
    assert pair.key_pem.startswith("-----BEGIN PRIVATE KEY-----")


def test_make_ca_two_runs_make_two_different_keys() -> None:
    # Given / When two CAs / Then nothing is reused between them (no fixed seed, no cached key)
    first, second = make_ca("a", 1), make_ca("a", 1)
    assert first.key_pem != second.key_pem and first.cert_pem != second.cert_pem


@pytest.mark.parametrize("bad", [0, -5])
def test_make_ca_refuses_a_validity_under_a_day(bad: int) -> None:
    with pytest.raises(ValueError, match="validity_days"):
        make_ca("a", bad)


def test_is_ca_certificate_only_for_a_ca() -> None:
    # Given a CA, a leaf it signed, the placeholder and broken PEM
    pair = make_ca("a", 1)
    ca = x509.load_pem_x509_certificate(pair.cert_pem.encode())
    key = serialization.load_pem_private_key(pair.key_pem.encode(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    leaf = leaf_signed_by(ca, key, "h.example.com").public_bytes(serialization.Encoding.PEM).decode()
    broken = "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"
    # Then only the CA counts as one an earlier run made
    assert is_ca_certificate(pair.cert_pem)
    assert not is_ca_certificate(leaf)
    assert not is_ca_certificate(PLACEHOLDER)
    assert not is_ca_certificate(broken)
    assert not is_ca_certificate(pair.key_pem)


# --- the custom resources -----------------------------------------------------------------------
def test_ca_create_writes_a_matching_key_and_certificate(ca_secrets: dict[str, str]) -> None:
    # Given the two secrets CloudFormation made with their placeholder
    # When the CA resource is created
    outcome = resources.handle(ca_event(ca_secrets))
    # Then it succeeds with the certificate secret as its id, and the secrets hold a CA and its key
    assert outcome.status == SUCCESS and outcome.physical_id == ca_secrets["CertSecretArn"]
    cert = x509.load_pem_x509_certificate(secret(ca_secrets["CertSecretArn"]).encode())
    key = serialization.load_pem_private_key(secret(ca_secrets["KeySecretArn"]).encode(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    assert (
        cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
        == "Thinkwork sandbox egress CA (test)"
    )
    signature = key.sign(b"probe", padding.PKCS1v15(), hashes.SHA256())
    cert.public_key().verify(signature, b"probe", padding.PKCS1v15(), hashes.SHA256())  # type: ignore[union-attr]


@pytest.mark.parametrize("request_type", ["Create", "Update"])
def test_ca_a_later_create_or_update_keeps_the_ca(ca_secrets: dict[str, str], request_type: str) -> None:
    # Given a CA made by a first deploy
    resources.handle(ca_event(ca_secrets))
    before = (secret(ca_secrets["CertSecretArn"]), secret(ca_secrets["KeySecretArn"]))
    # When a retried Create or a later Update (another validity, say) comes
    outcome = resources.handle(
        ca_event(
            {**ca_secrets, "ValidityDays": "90"}, request_type, PhysicalResourceId=ca_secrets["CertSecretArn"]
        )
    )
    # Then sessions and the proxy keep the CA they have
    assert outcome.status == SUCCESS and outcome.reason == "CA kept"
    assert (secret(ca_secrets["CertSecretArn"]), secret(ca_secrets["KeySecretArn"])) == before


def test_ca_delete_leaves_the_secrets_to_cloudformation(ca_secrets: dict[str, str]) -> None:
    # Given a made CA / When the resource is deleted / Then it answers SUCCESS and touches nothing
    resources.handle(ca_event(ca_secrets))
    before = secret(ca_secrets["CertSecretArn"])
    outcome = resources.handle(ca_event(ca_secrets, "Delete", PhysicalResourceId=ca_secrets["CertSecretArn"]))
    assert outcome.status == SUCCESS and outcome.physical_id == ca_secrets["CertSecretArn"]
    assert secret(ca_secrets["CertSecretArn"]) == before


def test_ca_missing_certificate_secret_fails_and_writes_no_key(ca_secrets: dict[str, str]) -> None:
    # Given a certificate secret that does not exist
    props = {**ca_secrets, "CertSecretArn": ca_secrets["CertSecretArn"].replace("ca-cert", "nope")}
    # When the CA resource is created
    outcome = resources.handle(ca_event(props))
    # Then the answer is FAILED naming the error, and no key was written anywhere
    assert outcome.status == FAILED and "ResourceNotFoundException" in outcome.reason
    assert secret(ca_secrets["KeySecretArn"]) == PLACEHOLDER


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"ResourceType": "Custom::Nope"}, "unknown resource type 'Custom::Nope'"),
        ({"RequestType": "Replace"}, "unknown request type 'Replace'"),
        ({"ResourceProperties": {}}, "KeyError"),
    ],
)
def test_handle_bad_requests_fail_with_a_reason(
    moto_endpoint: str, change: dict[str, Any], expected: str
) -> None:
    # Given a malformed request / When handled / Then FAILED with a reason, never an exception
    outcome = resources.handle({**ca_event({}), **change})
    assert outcome.status == FAILED
    assert expected in outcome.reason


def test_ca_bad_validity_fails_and_writes_nothing(ca_secrets: dict[str, str]) -> None:
    # Given a validity that is not a number / When the CA is created / Then FAILED, secrets untouched
    outcome = resources.handle(ca_event({**ca_secrets, "ValidityDays": "ten"}))
    assert outcome.status == FAILED and "ValueError" in outcome.reason
    assert secret(ca_secrets["CertSecretArn"]) == secret(ca_secrets["KeySecretArn"]) == PLACEHOLDER


def test_prefix_list_create_finds_the_regions_s3_list(moto_endpoint: str) -> None:
    # Given the region's managed prefix lists (moto has AWS's own)
    expected = boto3.client("ec2").describe_managed_prefix_lists(
        Filters=[{"Name": "prefix-list-name", "Values": ["com.amazonaws.us-east-1.s3"]}]
    )["PrefixLists"][0]["PrefixListId"]
    event = {**ca_event({}), "ResourceType": resources.PREFIX_LIST_RESOURCE}
    event["ResourceProperties"] = {"PrefixListName": "com.amazonaws.us-east-1.s3"}
    # When the lookup resource is created / Then its id is the answer's data and physical id
    outcome = resources.handle(event)
    assert outcome.status == SUCCESS
    assert outcome.data == {"PrefixListId": expected} and outcome.physical_id == expected


def test_prefix_list_unknown_name_fails(moto_endpoint: str) -> None:
    event = {**ca_event({}), "ResourceType": resources.PREFIX_LIST_RESOURCE}
    event["ResourceProperties"] = {"PrefixListName": "com.amazonaws.nowhere-1.s3"}
    outcome = resources.handle(event)
    assert outcome.status == FAILED and "found 0" in outcome.reason


# --- the answer to CloudFormation ---------------------------------------------------------------
class _Recorder(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, dict[str, str], bytes]] = []

    def do_PUT(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.path, dict(self.headers), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def response_url() -> Iterator[tuple[str, list[tuple[str, dict[str, str], bytes]]]]:
    """A local stand-in for the presigned S3 URL CloudFormation listens on."""
    received: list[tuple[str, dict[str, str], bytes]] = []
    recorder = type("Recorder", (_Recorder,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/cfn-response?X-Amz-Signature=abc", received
    finally:
        server.shutdown()
        server.server_close()


def test_handler_puts_exactly_one_answer(ca_secrets: dict[str, str], response_url, capsys) -> None:
    url, received = response_url
    # Given a Create request whose answer goes to the presigned URL
    event = ca_event(ca_secrets, ResponseURL=url)
    # When the Lambda handles it
    handler_module.handler(event, None)
    # Then one PUT with the answer's JSON came, with the empty content type the URL was signed for
    ((path, headers, body),) = received
    assert path == "/cfn-response?X-Amz-Signature=abc" and headers.get("Content-Type") == ""
    answer = json.loads(body)
    assert answer["Status"] == SUCCESS and answer["PhysicalResourceId"] == ca_secrets["CertSecretArn"]
    assert {k: answer[k] for k in ("StackId", "RequestId", "LogicalResourceId")} == {
        k: event[k] for k in ("StackId", "RequestId", "LogicalResourceId")
    }
    # And one JSON log line says what happened (never the key)
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert line["status"] == SUCCESS and "PRIVATE KEY" not in json.dumps(line)


def test_handler_an_unexpected_error_is_still_answered_failed(monkeypatch, response_url) -> None:
    url, received = response_url

    def broken(event: dict[str, Any]) -> None:
        raise RuntimeError("boom")

    # Given a handler whose logic crashes in a way it did not foresee
    monkeypatch.setattr(handler_module, "handle", broken)
    # When a request comes / Then CloudFormation still gets its one answer: FAILED, with the reason
    handler_module.handler(ca_event({}, ResponseURL=url), None)
    ((_, _, body),) = received
    answer = json.loads(body)
    assert answer["Status"] == FAILED and "RuntimeError: boom" in answer["Reason"]
    assert answer["PhysicalResourceId"] == "EgressSetupCa"
