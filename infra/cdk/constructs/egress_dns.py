"""The sessions VPC's Route 53 Resolver DNS Firewall (docs/egress.md, "DNS is not a way out").

A session resolves only what it must reach itself: the egress proxy's load balancer and S3 (its
gateway endpoint). Every other name is answered NXDOMAIN, so a session cannot leak data in DNS
queries to a name server someone else runs. The hosts a policy allows are not in this list: a
session asks the proxy for them (HTTP CONNECT by name) and the proxy, in the egress VPC where this
rule group is not associated, resolves them. The firewall fails closed (the VPC's default
`FirewallFailOpen` is disabled): if it cannot decide, the query is not answered.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_route53resolver as resolver
from constructs import Construct
from sandbox_common import naming as n

from infra.cdk.config import StageConfig

ALLOW_PRIORITY = 100
BLOCK_PRIORITY = 200
# Association priorities run from 101 to 9899; this is the sessions VPC's only rule group.
ASSOCIATION_PRIORITY = 101
BLOCK_EVERYTHING = "*"


def s3_names(region: str) -> list[str]:
    """The names an S3 client uses in a region and their subdomains (virtual-hosted buckets), IPv4
    only: the gateway endpoint carries no dual-stack traffic."""
    return [name for base in n.s3_endpoint_names(region) for name in (base, f"*.{base}")]


class EgressDnsConstruct(Construct):
    """Attributes: `allowed` and `blocked` (domain lists), `rule_group`, `association`."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: StageConfig,
        vpc: ec2.IVpc,
        proxy_dns_name: str,
    ) -> None:
        super().__init__(scope, id_)
        prefix = f"{n.PROJECT}-{config.name}-sessions"
        self.allowed = resolver.CfnFirewallDomainList(
            self,
            "SessionNames",
            name=f"{prefix}-allowed",
            domains=[proxy_dns_name, *s3_names(cdk.Stack.of(self).region)],
        )
        self.blocked = resolver.CfnFirewallDomainList(
            self, "EverythingElse", name=f"{prefix}-everything-else", domains=[BLOCK_EVERYTHING]
        )
        self.rule_group = resolver.CfnFirewallRuleGroup(
            self,
            "RuleGroup",
            name=f"{prefix}-dns",
            firewall_rules=[
                resolver.CfnFirewallRuleGroup.FirewallRuleProperty(
                    action="ALLOW",
                    firewall_domain_list_id=self.allowed.attr_id,
                    priority=ALLOW_PRIORITY,
                    # S3's names answer through CNAMEs of AWS's own; the chain of an allowed name
                    # is trusted instead of listing every intermediate name.
                    firewall_domain_redirection_action="TRUST_REDIRECTION_DOMAIN",
                ),
                resolver.CfnFirewallRuleGroup.FirewallRuleProperty(
                    action="BLOCK",
                    block_response="NXDOMAIN",
                    firewall_domain_list_id=self.blocked.attr_id,
                    priority=BLOCK_PRIORITY,
                ),
            ],
        )
        self.association = resolver.CfnFirewallRuleGroupAssociation(
            self,
            "Association",
            name=f"{prefix}-dns",
            firewall_rule_group_id=self.rule_group.attr_id,
            vpc_id=vpc.vpc_id,
            priority=ASSOCIATION_PRIORITY,
            # Mutation protection would also stop CloudFormation from removing it at tear-down;
            # who may change it is the deployer's IAM, like every resource of the stack.
            mutation_protection="DISABLED",
        )
