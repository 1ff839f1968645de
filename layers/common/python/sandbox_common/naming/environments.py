"""The environments a tenant's code runs in (each one's network mode and egress), and the
compliance tiers."""

from __future__ import annotations

from typing import Literal

Environment = Literal["default-public", "internal-only", "default-allowlist"]
ENVIRONMENTS: tuple[str, ...] = ("default-public", "internal-only", "default-allowlist")
# The Code Interpreter network mode each environment is created with (create-only on AWS) ...
NETWORK_MODE: dict[str, str] = {
    "default-public": "PUBLIC",
    "internal-only": "SANDBOX",
    "default-allowlist": "VPC",
}
# ... and its egress (sandbox_common.egress_policy): `public` goes anywhere, `none` nowhere, and
# `allowlist` only through the stage's egress proxy, by the tenant's policy for that environment.
EGRESS_MODE: dict[str, str] = {
    "default-public": "public",
    "internal-only": "none",
    "default-allowlist": "allowlist",
}
# The short form of each environment in interpreter names (which are at most 48 characters).
ENVIRONMENT_ABBREVIATIONS: dict[str, str] = {
    "default-public": "pub",
    "internal-only": "int",
    "default-allowlist": "alw",
}

ComplianceTier = Literal["standard", "regulated", "hipaa"]
COMPLIANCE_TIERS: tuple[str, ...] = ("standard", "regulated", "hipaa")
