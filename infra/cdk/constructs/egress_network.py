"""The two VPCs of a stage's egress path (docs/egress.md, "On AWS").

- The **sessions VPC** holds the ENIs of VPC-mode Code Interpreter sessions. Its subnets are
  isolated: no internet gateway, no NAT gateway, no route to either. Its routes reach only the
  egress VPC's proxy subnets (through the peering) and S3 (through a gateway endpoint whose policy
  admits principals of this account only, so a session cannot write to someone else's bucket).
  The stage's DNS Firewall rule group is associated with this VPC (egress_dns).
- The **egress VPC** holds the proxy service and its internal Network Load Balancer in private
  subnets, whose default route goes to the NAT gateways in the public subnets: the only way out.
  The DNS Firewall is not associated with it: the proxy resolves the allowlisted hosts itself.

Why two VPCs: a Route 53 Resolver DNS Firewall rule group applies to every query of the VPC it is
associated with, whatever its source. Sessions must resolve nothing but the proxy's and S3's names,
while the proxy must resolve any allowlisted host; in one VPC, one of the two would be wrong.
VPC peering carries the sessions' connections to the load balancer with their source addresses (the
proxy binds a credential to its session's address), and a peered VPC can never use the other's NAT
gateway or internet gateway (no edge-to-edge routing).
"""

from __future__ import annotations

import ipaddress

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm
from constructs import Construct
from sandbox_common import naming as n

from infra.cdk.config import EgressStage, StageConfig
from infra.cdk.constructs.compute import stage_log_group

SESSIONS_SUBNET_GROUP = "Sessions"
PROXY_SUBNET_GROUP = "Proxy"
PUBLIC_SUBNET_GROUP = "Public"
# What a session may do through the S3 gateway endpoint: what its execution role can be granted
# (the tenant's own data), and only as a principal of this account.
SESSION_S3_ACTIONS: tuple[str, ...] = ("s3:GetObject", "s3:PutObject", "s3:ListBucket")


def subnet_mask(cidr: str, extra_bits: int) -> int:
    return ipaddress.IPv4Network(cidr).prefixlen + extra_bits


class EgressNetworkConstruct(Construct):
    """Attributes: `sessions_vpc`, `egress_vpc`, `peering`, `nlb_security_group`,
    `proxy_security_group`, `s3_endpoint`, `parameters` (leaf -> StringParameter, what the tenant
    shards read: naming.EGRESS_NETWORK_PARAMETERS minus what other constructs publish)."""

    def __init__(self, scope: Construct, id_: str, *, config: StageConfig, egress: EgressStage) -> None:
        super().__init__(scope, id_)
        self._config = config
        self._egress = egress
        self.sessions_vpc = self._build_sessions_vpc()
        self.egress_vpc = self._build_egress_vpc()
        self.peering = self._build_peering()
        self.s3_endpoint = self._build_s3_endpoint()
        self.nlb_security_group, self.proxy_security_group = self._build_security_groups()
        self._build_flow_logs()
        self.parameters = self._build_parameters()

    # --- VPCs ------------------------------------------------------------------------------------
    def _zones(self) -> list[str]:
        """AZ names as CloudFormation picks them (Fn::GetAZs): no context lookup at synth. With
        `availability_zone_ids` each subnet is pinned to its AZ id instead (`_pin_zone_ids`)."""
        return [cdk.Fn.select(i, cdk.Fn.get_azs()) for i in range(self._egress.availability_zones)]

    def _pin_zone_ids(self, vpc: ec2.Vpc, *groups: list[ec2.ISubnet]) -> None:
        ids = self._egress.availability_zone_ids
        if not ids:
            return
        for subnets in groups:
            for subnet, zone_id in zip(subnets, ids, strict=True):
                cfn = subnet.node.default_child
                assert isinstance(cfn, ec2.CfnSubnet)
                cfn.add_property_deletion_override("AvailabilityZone")
                cfn.add_property_override("AvailabilityZoneId", zone_id)

    def _build_sessions_vpc(self) -> ec2.Vpc:
        vpc = ec2.Vpc(
            self,
            "SessionsVpc",
            vpc_name=f"{n.PROJECT}-{self._config.name}-sandbox-sessions",
            ip_addresses=ec2.IpAddresses.cidr(self._egress.sessions_cidr),
            availability_zones=self._zones(),
            nat_gateways=0,  # with only isolated subnets, no internet gateway is created either
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name=SESSIONS_SUBNET_GROUP,
                    subnet_type=ec2.SubnetType.PRIVATE_ISOLATED,
                    # AgentCore puts ENIs here: room for many interpreters' network interfaces.
                    cidr_mask=subnet_mask(self._egress.sessions_cidr, 2),
                )
            ],
            enable_dns_hostnames=True,
            enable_dns_support=True,
            restrict_default_security_group=False,  # nothing is placed in it; avoids a custom resource
        )
        self._pin_zone_ids(vpc, vpc.isolated_subnets)
        return vpc

    def _build_egress_vpc(self) -> ec2.Vpc:
        vpc = ec2.Vpc(
            self,
            "EgressVpc",
            vpc_name=f"{n.PROJECT}-{self._config.name}-sandbox-egress",
            ip_addresses=ec2.IpAddresses.cidr(self._egress.egress_cidr),
            availability_zones=self._zones(),
            nat_gateways=self._egress.nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name=PUBLIC_SUBNET_GROUP,
                    subnet_type=ec2.SubnetType.PUBLIC,
                    map_public_ip_on_launch=False,  # only the NAT gateways have public addresses
                    cidr_mask=subnet_mask(self._egress.egress_cidr, 4),
                ),
                ec2.SubnetConfiguration(
                    name=PROXY_SUBNET_GROUP,
                    subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                    cidr_mask=subnet_mask(self._egress.egress_cidr, 4),
                ),
            ],
            enable_dns_hostnames=True,
            enable_dns_support=True,
            restrict_default_security_group=False,
            # The proxy's own table traffic (credentials, counters) stays off the NAT gateways.
            gateway_endpoints={
                "DynamoDb": ec2.GatewayVpcEndpointOptions(
                    service=ec2.GatewayVpcEndpointAwsService.DYNAMODB,
                    subnets=[ec2.SubnetSelection(subnet_group_name=PROXY_SUBNET_GROUP)],
                )
            },
        )
        self._pin_zone_ids(vpc, vpc.public_subnets, vpc.private_subnets)
        return vpc

    @property
    def session_subnets(self) -> list[ec2.ISubnet]:
        return list(self.sessions_vpc.isolated_subnets)

    @property
    def proxy_subnets(self) -> list[ec2.ISubnet]:
        return list(self.egress_vpc.private_subnets)

    # --- peering: sessions reach the proxy subnets, and nothing else of the egress VPC ------------
    def _build_peering(self) -> ec2.CfnVPCPeeringConnection:
        peering = ec2.CfnVPCPeeringConnection(
            self,
            "Peering",
            vpc_id=self.sessions_vpc.vpc_id,
            peer_vpc_id=self.egress_vpc.vpc_id,  # same account and region: accepted on creation
            tags=[cdk.CfnTag(key="Name", value=f"{n.PROJECT}-{self._config.name}-sessions-to-egress")],
        )
        for i, subnet in enumerate(self.session_subnets):
            for j, proxy_subnet in enumerate(self.proxy_subnets):
                ec2.CfnRoute(
                    self,
                    f"SessionsToProxy{i}{j}",
                    route_table_id=subnet.route_table.route_table_id,
                    destination_cidr_block=proxy_subnet.ipv4_cidr_block,
                    vpc_peering_connection_id=peering.ref,
                )
        # The way back, from the proxy subnets only: the public subnets (NAT gateways) have none.
        for j, proxy_subnet in enumerate(self.proxy_subnets):
            ec2.CfnRoute(
                self,
                f"ProxyToSessions{j}",
                route_table_id=proxy_subnet.route_table.route_table_id,
                destination_cidr_block=self._egress.sessions_cidr,
                vpc_peering_connection_id=peering.ref,
            )
        return peering

    def _build_s3_endpoint(self) -> ec2.GatewayVpcEndpoint:
        endpoint = self.sessions_vpc.add_gateway_endpoint(
            "S3",
            service=ec2.GatewayVpcEndpointAwsService.S3,
            subnets=[ec2.SubnetSelection(subnet_group_name=SESSIONS_SUBNET_GROUP)],
        )
        # Replaces the default full-access policy: a request signed by another account (its keys,
        # a presigned URL) or an anonymous one is refused at the endpoint, so a session cannot
        # copy tenant data to a bucket someone else can read.
        endpoint.add_to_policy(
            iam.PolicyStatement(
                sid="ThisAccountsPrincipalsOnly",
                principals=[iam.AnyPrincipal()],
                actions=list(SESSION_S3_ACTIONS),
                resources=["*"],
                conditions={"StringEquals": {"aws:PrincipalAccount": cdk.Stack.of(self).account}},
            )
        )
        return endpoint

    # --- security groups ---------------------------------------------------------------------------
    def _build_security_groups(self) -> tuple[ec2.SecurityGroup, ec2.SecurityGroup]:
        port = self._egress.proxy_port
        nlb = ec2.SecurityGroup(
            self,
            "LoadBalancerSecurityGroup",
            vpc=self.egress_vpc,
            description="Egress proxy load balancer: the proxy port from the sessions VPC only",
            allow_all_outbound=False,
        )
        nlb.add_ingress_rule(
            ec2.Peer.ipv4(self._egress.sessions_cidr),
            ec2.Port.tcp(port),
            "Sessions of allowlist environments (sessions VPC, through the peering)",
        )
        proxy = ec2.SecurityGroup(
            self,
            "ProxySecurityGroup",
            vpc=self.egress_vpc,
            description="Egress proxy tasks: from their load balancer only; out to allowlisted hosts",
            allow_all_outbound=False,
        )
        proxy.add_ingress_rule(nlb, ec2.Port.tcp(port), "The proxy's load balancer (client IPs preserved)")
        # Which host and port may be reached is the proxy's policy decision (an allow rule may list
        # any port); the group lets TCP out, the proxy subnets' route sends it to the NAT gateways.
        proxy.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.all_tcp(), "Allowlisted hosts, through NAT")
        # Inline CIDR rules: a group whose only egress rules reference other groups (separate
        # resources) would keep EC2's default allow-all egress.
        for subnet in self.proxy_subnets:
            nlb.add_egress_rule(ec2.Peer.ipv4(subnet.ipv4_cidr_block), ec2.Port.tcp(port), "The proxy tasks")
        return nlb, proxy

    def _build_flow_logs(self) -> None:
        """Every accepted and rejected flow of both VPCs: what a session tried to reach is evidence."""
        log_group = stage_log_group(
            self, "FlowLogs", f"/{n.PROJECT}/{self._config.name}/sandbox/egress-flow-logs", self._config
        )
        role = iam.Role(
            self,
            "FlowLogsRole",
            assumed_by=iam.ServicePrincipal("vpc-flow-logs.amazonaws.com"),
            description="VPC flow logs of the egress path: write to their one log group",
        )
        for cid, vpc in (("Sessions", self.sessions_vpc), ("Egress", self.egress_vpc)):
            ec2.FlowLog(
                self,
                f"{cid}FlowLog",
                resource_type=ec2.FlowLogResourceType.from_vpc(vpc),
                destination=ec2.FlowLogDestination.to_cloud_watch_logs(log_group, role),
                traffic_type=ec2.FlowLogTrafficType.ALL,
            )

    def _build_parameters(self) -> dict[str, ssm.StringParameter | ssm.StringListParameter]:
        stage = self._config.name
        return {
            n.EGRESS_SESSION_SUBNETS: ssm.StringListParameter(
                self,
                "SessionSubnetsParameter",
                parameter_name=n.egress_network_parameter(stage, n.EGRESS_SESSION_SUBNETS),
                string_list_value=[s.subnet_id for s in self.session_subnets],
                description="Isolated subnets of the sessions VPC (VPC-mode Code Interpreters)",
            ),
            n.EGRESS_SESSIONS_VPC: ssm.StringParameter(
                self,
                "SessionsVpcParameter",
                parameter_name=n.egress_network_parameter(stage, n.EGRESS_SESSIONS_VPC),
                string_value=self.sessions_vpc.vpc_id,
                description="The sessions VPC (VPC-mode Code Interpreters' security groups live in it)",
            ),
        }
