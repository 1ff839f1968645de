"""The stage's CA from deploy to use: the egress setup custom resource writes it into Secrets
Manager (moto), the proxy's `--ca-from-secrets` reads it into its CA directory, and mitmproxy (the
proxy's own venv) signs a host's certificate with it, which the CA certificate sessions trust
verifies."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import boto3
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from egress_setup import resources
from egress_setup.cfn_response import SUCCESS
from sandbox_common import naming as n

from infra.cdk.constructs.egress_setup import PLACEHOLDER
from infra.local.egress import egress_python, python_path

PYTHON = egress_python()
pytestmark = pytest.mark.skipif(PYTHON is None, reason="needs .venv-egress (make egress-runtime)")
STAGE = "catest"

# Run in the proxy's venv: its own CA loading, then mitmproxy's certificate store on that directory.
PROBE = """
import sys
from pathlib import Path
from mitmproxy import certs
from egress_proxy.__main__ import ca_from_secrets
from egress_proxy.config import ProxyConfig

confdir = sys.argv[1]
ca_from_secrets(ProxyConfig(stage=sys.argv[2], confdir=confdir))
store = certs.CertStore.from_store(confdir, "mitmproxy", 2048)
entry = store.get_cert("api.example.com", ["api.example.com"])
sys.stdout.write(entry.cert.to_pem().decode("ascii"))
"""


def test_the_ca_the_setup_writes_is_the_ca_the_proxy_signs_with(moto_endpoint: str, tmp_path: Path) -> None:
    resources._client.cache_clear()
    # Given the two secrets CloudFormation creates, and the custom resource's Create
    sm = boto3.client("secretsmanager")
    cert_arn = sm.create_secret(Name=n.egress_ca_cert_secret_name(STAGE), SecretString=PLACEHOLDER)["ARN"]
    key_arn = sm.create_secret(Name=n.egress_ca_key_secret_name(STAGE), SecretString=PLACEHOLDER)["ARN"]
    outcome = resources.handle(
        {
            "RequestType": "Create",
            "ResourceType": resources.CA_RESOURCE,
            "LogicalResourceId": "EgressSetupCa",
            "ResourceProperties": {
                "CertSecretArn": cert_arn,
                "KeySecretArn": key_arn,
                "CommonName": f"Thinkwork sandbox egress CA ({STAGE})",
                "ValidityDays": "30",
            },
        }
    )
    assert outcome.status == SUCCESS
    ca = x509.load_pem_x509_certificate(sm.get_secret_value(SecretId=cert_arn)["SecretString"].encode())
    # When the proxy, in its own venv, loads the CA from the secrets and mitmproxy signs for a host
    confdir = tmp_path / "egress-ca"
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": python_path(),
        "AWS_ENDPOINT_URL": moto_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
    }
    done = subprocess.run(
        [str(PYTHON), "-c", PROBE, str(confdir), STAGE], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    leaf = x509.load_pem_x509_certificate(done.stdout.encode())
    # Then the host's certificate is issued by the stage's CA (what sessions trust) for that host
    leaf.verify_directly_issued_by(ca)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["api.example.com"]
    usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage
    # And the key stays in a directory and file only the proxy's user can read
    assert stat.S_IMODE(os.stat(confdir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(confdir / "mitmproxy-ca.pem").st_mode) == 0o600
