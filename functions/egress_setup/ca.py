"""The egress proxy's certificate authority: an RSA key and a self-signed CA certificate, the shape
mitmproxy makes for itself (CA, may sign TLS server certificates), made once per stage.

The proxy signs a certificate for every host a session reaches with this key; sessions trust the
certificate through the Code Interpreter's `certificates` (installed in the OS trust store). The
key never leaves the key secret and the proxy.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_BITS = 2048  # mitmproxy's own CA size; every intercepted connection is signed with it
CLOCK_SKEW = dt.timedelta(days=1)  # valid from yesterday: a session's clock a little behind still trusts it
CERT_PEM_HEADER = "-----BEGIN CERTIFICATE-----"


@dataclass(frozen=True)
class CaPair:
    cert_pem: str
    key_pem: str  # PKCS#8, unencrypted: the secret's protection is Secrets Manager's


def make_ca(common_name: str, validity_days: int, *, now: dt.datetime | None = None) -> CaPair:
    if validity_days < 1:
        raise ValueError("validity_days must be at least 1")
    now = now or dt.datetime.now(dt.UTC)
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Thinkwork sandbox egress"),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + dt.timedelta(days=validity_days))
        # It signs end-entity certificates directly: no intermediate below it.
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CaPair(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM).decode("ascii"),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode("ascii"),
    )


def is_ca_certificate(text: str) -> bool:
    """A PEM certificate that is a CA (what a finished earlier run left in the cert secret)."""
    if not text.lstrip().startswith(CERT_PEM_HEADER):
        return False
    try:
        cert = x509.load_pem_x509_certificate(text.encode("ascii"))
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except (ValueError, x509.ExtensionNotFound):
        return False
