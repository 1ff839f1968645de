"""A stage's egress path on AWS, composed (docs/egress.md, "On AWS"): the two VPCs, the CA and the
S3 prefix list made at deploy, the package index, the proxy service and the sessions' DNS Firewall.

What the rest of the stage needs from it: `proxy_url`, `ca_bundle` and `index_url` (dispatch and
the reaper hand them to the sessions they start), and the SSM parameters the tenant shards read
(`parameters`, by naming.EGRESS_NETWORK_PARAMETERS leaf).
"""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm
from constructs import Construct
from sandbox_common import naming as n

from infra.cdk.config import EgressStage, StageConfig
from infra.cdk.constructs.egress_dns import EgressDnsConstruct
from infra.cdk.constructs.egress_network import EgressNetworkConstruct
from infra.cdk.constructs.egress_proxy import EgressProxyConstruct
from infra.cdk.constructs.egress_setup import EgressSetupConstruct
from infra.cdk.constructs.package_index import PackageIndexConstruct
from infra.cdk.function_env import proxy_command, proxy_environment

# Where a session's programs find the proxy CA. AgentCore documents that `certificates` go into the
# session's OS trust store, not the file: this is the OpenSSL bundle of Debian-family systems (on
# Amazon Linux it is /etc/pki/tls/certs/ca-bundle.crt); docs/egress.md says what to check.
AGENTCORE_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


class EgressConstruct(Construct):
    """Attributes: `network`, `setup`, `index`, `proxy`, `dns`, `proxy_url`, `ca_bundle`,
    `index_url`, `parameters`. `tables` and `table_arns` map TableSpec.logical -> name / ARN;
    `runner_role` is the stage's session-runner role (it reads the CA certificate)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: StageConfig,
        egress: EgressStage,
        tables: Mapping[str, str],
        table_arns: Mapping[str, str],
        runner_role: iam.CfnRole,
    ) -> None:
        super().__init__(scope, id_)
        self.network = EgressNetworkConstruct(self, "Network", config=config, egress=egress)
        self.setup = EgressSetupConstruct(self, "Setup", config=config, egress=egress)
        self.index = PackageIndexConstruct(self, "PackageIndex", config=config)
        self.proxy = EgressProxyConstruct(
            self,
            "Proxy",
            config=config,
            egress=egress,
            network=self.network,
            index=self.index,
            environment=proxy_environment(cdk.Stack.of(self).region),
            command=proxy_command(
                config,
                tables=tables,
                port=egress.proxy_port,
                index_url=self.index.index_url,
                codeartifact_domain=n.package_index_domain(config.name),
                account=cdk.Stack.of(self).account,
            ),
            table_arns=table_arns,
        )
        self.setup.restrict_key_to(self.proxy.task_role)
        self.setup.grant_certificate_to(runner_role)
        # A task reads the CA when it starts: the service waits for the custom resource that
        # writes it (a task started on the placeholder would fail, and the deploy roll back).
        self.proxy.service.node.add_dependency(self.setup.ca)
        self.dns = EgressDnsConstruct(
            self,
            "SessionDns",
            config=config,
            vpc=self.network.sessions_vpc,
            proxy_dns_name=self.proxy.load_balancer.load_balancer_dns_name,
        )
        self.proxy_url = self.proxy.proxy_url
        self.ca_bundle = AGENTCORE_CA_BUNDLE
        self.index_url = self.index.index_url
        self.parameters: dict[str, ssm.IStringParameter | ssm.IStringListParameter] = {
            **self.network.parameters,
            **self.setup.parameters,
        }
