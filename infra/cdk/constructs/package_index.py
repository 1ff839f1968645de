"""The stage's package index (docs/egress.md, "On AWS"): a CodeArtifact domain and one PyPI
repository with an external connection to the public index. A session's pip reaches it through the
egress proxy, which lets through the pages and files of the packages its policy lists and adds the
CodeArtifact token itself (the session holds no AWS credential for it)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_codeartifact as codeartifact
from constructs import Construct
from sandbox_common import naming as n

from infra.cdk.config import StageConfig
from infra.cdk.constructs.state import removal_policy


def index_url(domain: str, account: str, region: str) -> str:
    """The repository's pip index, as `aws codeartifact get-repository-endpoint` gives it plus
    `simple/` (CodeArtifact's PyPI layout); pip reaches it without credentials, the proxy adds them."""
    host = f"{domain}-{account}.d.codeartifact.{region}.amazonaws.com"
    return f"https://{host}/pypi/{n.PACKAGE_INDEX_REPOSITORY}/simple/"


class PackageIndexConstruct(Construct):
    """Attributes: `domain`, `repository` (L1), `index_url` (a token), `domain_arn`,
    `repository_arn`."""

    def __init__(self, scope: Construct, id_: str, *, config: StageConfig) -> None:
        super().__init__(scope, id_)
        stack = cdk.Stack.of(self)
        self.domain = codeartifact.CfnDomain(self, "Domain", domain_name=n.package_index_domain(config.name))
        self.domain.apply_removal_policy(removal_policy(config))
        self.repository = codeartifact.CfnRepository(
            self,
            "Repository",
            domain_name=self.domain.attr_name,
            domain_owner=self.domain.attr_owner,
            repository_name=n.PACKAGE_INDEX_REPOSITORY,
            external_connections=[n.PACKAGE_INDEX_UPSTREAM],
            description="Packages sessions of allowlist environments may install (public PyPI upstream)",
        )
        self.repository.apply_removal_policy(removal_policy(config))
        self.domain_arn = self.domain.attr_arn
        self.repository_arn = self.repository.attr_arn
        self.index_url = index_url(n.package_index_domain(config.name), stack.account, stack.region)
