"""The egress proxy: its package and virtual environment, its service on ECS (Fargate), the name it
answers itself, and the stage's package index (CodeArtifact) with the local stack's stand-in."""

from __future__ import annotations

from .ids import PROJECT

# The egress proxy (functions/egress_proxy): run by the local stack and the stage's proxy
# container under its own virtual environment, never shipped in a Lambda.
EGRESS_PROXY_PACKAGE = "egress_proxy"
EGRESS_VENV_DIR = ".venv-egress"
# The name the proxy answers itself (never forwarded): a session binds its credential to its
# address with a request to http(s)://egress.sandbox.internal/bind through the proxy.
EGRESS_PSEUDO_HOST = "egress.sandbox.internal"
EGRESS_BIND_PATH = "/bind"
# The local stack's package index, as sessions name it (the local egress proxy routes it to the
# stack's own index server; on AWS the index is the stage's CodeArtifact repository).
LOCAL_PACKAGE_INDEX_HOST = "packages.sandbox.internal"
LOCAL_PACKAGE_INDEX_URL = f"https://{LOCAL_PACKAGE_INDEX_HOST}/simple/"


def egress_proxy_name(stage: str) -> str:
    """The proxy's ECS cluster and service, and its load balancer (≤ 32 characters)."""
    return f"{PROJECT}-{stage}-egress"[:32]


def egress_proxy_log_group(stage: str) -> str:
    return f"/{PROJECT}/{stage}/sandbox/egress-proxy"


def package_index_domain(stage: str) -> str:
    """CodeArtifact domain: lower-case letters, digits and hyphens, unique per account and region."""
    return f"{PROJECT}-{stage}"


PACKAGE_INDEX_REPOSITORY = "pypi"  # its one repository, with an external connection to public PyPI
PACKAGE_INDEX_UPSTREAM = "public:pypi"
