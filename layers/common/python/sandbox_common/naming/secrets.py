"""Secrets Manager: the tenants' own secrets and the egress proxy's CA."""

from __future__ import annotations

from .ids import PROJECT, REQUEST_ID_RE, SECRET_NAME_RE


def tenant_secrets_prefix(stage: str, tenant_id: str) -> str:
    """Every secret of one tenant is named under it; an egress credential reads only these."""
    if not REQUEST_ID_RE.match(tenant_id):
        raise ValueError("tenant id not valid for a secret name")
    return f"{PROJECT}/{stage}/tenants/{tenant_id}/"


def tenant_secret_name(stage: str, tenant_id: str, name: str) -> str:
    """A tenant secret by its short name (`crm-token`)."""
    if not SECRET_NAME_RE.match(name):
        raise ValueError(f"secret name {name!r} must match {SECRET_NAME_RE.pattern}")
    return f"{tenant_secrets_prefix(stage, tenant_id)}{name}"


def egress_ca_cert_secret_name(stage: str) -> str:
    """The egress proxy's CA certificate (PEM), given to the allowlist interpreters' `certificates`."""
    return f"{PROJECT}/{stage}/egress/ca-cert"


def egress_ca_key_secret_name(stage: str) -> str:
    """The CA's private key (PEM): read by the proxy only."""
    return f"{PROJECT}/{stage}/egress/ca-key"
