"""The egress proxy service (docs/egress.md, "On AWS"): the proxy package (`functions/egress_proxy`,
a mitmproxy addon) in a container on ECS Fargate, behind an internal Network Load Balancer in the
egress VPC's private subnets, scaled on CPU.

- The load balancer preserves client IPs: the proxy binds each session's credential to the address
  its session connects from, which it only sees this way.
- The image is a Dockerfile asset whose build context is the repository filtered down to the proxy
  package, `sandbox_common` and the Dockerfile (`IMAGE_CONTEXT_INCLUDES`): its hash changes only
  when one of those does, and `cdk synth` needs no Docker (`cdk deploy` builds it with Docker or
  Finch, like any CDK image asset).
- The task role holds exactly what the proxy does: read policies, caps and the tenants' secrets,
  read the CA, keep per-session state and the tenants' egress byte counters, and read packages from
  the stage's index with a token of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_iam as iam
from constructs import Construct
from sandbox_common import naming as n

from infra.cdk.config import EgressStage, StageConfig
from infra.cdk.constructs.compute import stage_log_group
from infra.cdk.constructs.egress_network import PROXY_SUBNET_GROUP, EgressNetworkConstruct
from infra.cdk.constructs.grants import allow, ssm_parameter_arn
from infra.cdk.constructs.nag import acknowledge, finding_arn
from infra.cdk.constructs.package_index import PackageIndexConstruct
from infra.cdk.layer_build import REPO_ROOT

CONTAINER_NAME = "proxy"
DOCKERFILE = "infra/cdk/images/egress_proxy.Dockerfile"
PROXY_PACKAGE = "functions/egress_proxy"
# The build context: the repository minus everything but these (Docker ignore syntax, so the
# fingerprint and the staged context are the same small tree).
IMAGE_CONTEXT_INCLUDES: tuple[str, ...] = (PROXY_PACKAGE, "layers/common/python/sandbox_common", DOCKERFILE)
IMAGE_CONTEXT_EXCLUDES: tuple[str, ...] = (
    "*",
    *(f"!{path}" for path in IMAGE_CONTEXT_INCLUDES),
    "**/__pycache__",
    "**/*.pyc",
)
HEALTH_CHECK_INTERVAL = cdk.Duration.seconds(10)
DEREGISTRATION_DELAY = cdk.Duration.seconds(30)  # a session's next call reconnects to another task


def proxy_image(architecture: str) -> ecs.ContainerImage:
    return ecs.ContainerImage.from_asset(
        str(REPO_ROOT),
        file=DOCKERFILE,
        exclude=list(IMAGE_CONTEXT_EXCLUDES),
        ignore_mode=cdk.IgnoreMode.DOCKER,
        platform=ecr_assets.Platform.LINUX_ARM64
        if architecture == "arm64"
        else ecr_assets.Platform.LINUX_AMD64,
    )


class EgressProxyConstruct(Construct):
    """Attributes: `cluster`, `task_definition`, `service`, `load_balancer`, `target_group`,
    `task_role`, `proxy_url` (what a session's HTTPS_PROXY names, without its credential)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        config: StageConfig,
        egress: EgressStage,
        network: EgressNetworkConstruct,
        index: PackageIndexConstruct,
        environment: Mapping[str, str],
        command: Sequence[str],
        table_arns: Mapping[str, str],
    ) -> None:
        super().__init__(scope, id_)
        self._config = config
        self._egress = egress
        self._network = network
        self._index = index
        self._table_arns = table_arns
        self.task_role = self._build_task_role()
        self.cluster = ecs.Cluster(
            self,
            "Cluster",
            vpc=network.egress_vpc,
            cluster_name=n.egress_proxy_name(config.name),
            container_insights_v2=ecs.ContainerInsights.DISABLED,
        )
        acknowledge(
            self.cluster,
            "AwsSolutions-ECS4",
            "Container Insights would bill custom metrics for every task at rest; the service's CPU and "
            "memory utilisation (free) drive scaling, and the proxy's decisions are its own metrics.",
        )
        self.task_definition = self._build_task_definition(environment, command)
        self.service = self._build_service()
        self.load_balancer, self.target_group = self._build_load_balancer()
        self._build_scaling()
        self.proxy_url = f"http://{self.load_balancer.load_balancer_dns_name}:{egress.proxy_port}"

    # --- task ------------------------------------------------------------------------------------
    def _build_task_definition(
        self, environment: Mapping[str, str], command: Sequence[str]
    ) -> ecs.FargateTaskDefinition:
        arm = self._config.architecture == "arm64"
        task = ecs.FargateTaskDefinition(
            self,
            "Task",
            cpu=self._egress.proxy_cpu,
            memory_limit_mib=self._egress.proxy_memory_mib,
            task_role=self.task_role,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=ecs.CpuArchitecture.ARM64 if arm else ecs.CpuArchitecture.X86_64,
                operating_system_family=ecs.OperatingSystemFamily.LINUX,
            ),
        )
        log_group = stage_log_group(self, "Logs", n.egress_proxy_log_group(self._config.name), self._config)
        container = task.add_container(
            CONTAINER_NAME,
            image=proxy_image(self._config.architecture),
            logging=ecs.LogDrivers.aws_logs(stream_prefix="proxy", log_group=log_group),
            environment=dict(environment),
            command=list(command),
            port_mappings=[
                ecs.PortMapping(container_port=self._egress.proxy_port, protocol=ecs.Protocol.TCP)
            ],
            readonly_root_filesystem=True,
            essential=True,
            stop_timeout=cdk.Duration.seconds(30),
        )
        # The only writable place: the proxy's CA file and mitmproxy's scratch, gone with the task.
        task.add_volume(name="scratch")
        container.add_mount_points(
            ecs.MountPoint(container_path="/tmp", source_volume="scratch", read_only=False)
        )
        acknowledge(
            task,
            "AwsSolutions-ECS2",
            "The container's environment holds the region and the logger's names only; every secret "
            "(tenant credentials, the CA key) is read from Secrets Manager at run time.",
        )
        execution_role = task.obtain_execution_role()
        acknowledge(
            execution_role,
            "AwsSolutions-IAM5[Resource::*]",
            "ecr:GetAuthorizationToken has no resource-level permissions (IAM requires '*'); pulling is "
            "limited to the CDK asset repository by the statement CDK writes beside it.",
        )
        return task

    def _build_service(self) -> ecs.FargateService:
        return ecs.FargateService(
            self,
            "Service",
            cluster=self.cluster,
            task_definition=self.task_definition,
            service_name=n.egress_proxy_name(self._config.name),
            desired_count=self._egress.proxy_min_tasks,
            # A deploy starts the new tasks before it stops the old ones: egress never closes for it.
            min_healthy_percent=100,
            max_healthy_percent=200,
            security_groups=[self._network.proxy_security_group],
            vpc_subnets=ec2.SubnetSelection(subnet_group_name=PROXY_SUBNET_GROUP),
            assign_public_ip=False,
            circuit_breaker=ecs.DeploymentCircuitBreaker(enable=True, rollback=True),
            enable_execute_command=False,  # nobody opens a shell where tenants' secrets pass
            platform_version=ecs.FargatePlatformVersion.LATEST,
        )

    def _build_load_balancer(self) -> tuple[elbv2.NetworkLoadBalancer, elbv2.NetworkTargetGroup]:
        nlb = elbv2.NetworkLoadBalancer(
            self,
            "LoadBalancer",
            vpc=self._network.egress_vpc,
            internet_facing=False,
            load_balancer_name=n.egress_proxy_name(self._config.name),
            vpc_subnets=ec2.SubnetSelection(subnet_group_name=PROXY_SUBNET_GROUP),
            security_groups=[self._network.nlb_security_group],
            # With one task (dev), a session in the other AZ still reaches it.
            cross_zone_enabled=True,
        )
        acknowledge(
            nlb,
            "AwsSolutions-ELB2",
            "A Network Load Balancer writes access logs for TLS listeners only; this one is TCP (the "
            "proxy terminates TLS). Connections are recorded by the proxy per session and in the VPC "
            "flow logs.",
        )
        listener = nlb.add_listener("Proxy", port=self._egress.proxy_port, protocol=elbv2.Protocol.TCP)
        target_group = listener.add_targets(
            "Tasks",
            port=self._egress.proxy_port,
            protocol=elbv2.Protocol.TCP,
            targets=[
                self.service.load_balancer_target(
                    container_name=CONTAINER_NAME, container_port=self._egress.proxy_port
                )
            ],
            # Off by default for IP targets over TCP: the proxy must see each session's own address.
            preserve_client_ip=True,
            deregistration_delay=DEREGISTRATION_DELAY,
            health_check=elbv2.HealthCheck(
                protocol=elbv2.Protocol.TCP,
                interval=HEALTH_CHECK_INTERVAL,
                healthy_threshold_count=2,
                unhealthy_threshold_count=2,
            ),
        )
        return nlb, target_group

    def _build_scaling(self) -> None:
        scaling = self.service.auto_scale_task_count(
            min_capacity=self._egress.proxy_min_tasks, max_capacity=self._egress.proxy_max_tasks
        )
        scaling.scale_on_cpu_utilization(
            "Cpu",
            target_utilization_percent=self._egress.proxy_cpu_target_percent,
            scale_out_cooldown=cdk.Duration.seconds(60),
            scale_in_cooldown=cdk.Duration.seconds(300),
        )

    # --- what the proxy may do ----------------------------------------------------------------
    def _build_task_role(self) -> iam.Role:
        stack = cdk.Stack.of(self)
        role = iam.Role(
            self,
            "TaskRole",
            assumed_by=iam.ServicePrincipal(
                "ecs-tasks.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {
                        "aws:SourceArn": stack.format_arn(
                            service="ecs", resource="*", arn_format=cdk.ArnFormat.NO_RESOURCE_NAME
                        )
                    },
                },
            ),
            description="Egress proxy tasks: policies, caps, tenants' secrets, egress state, package index",
        )
        self._grant_task_role(role)
        return role

    def _grant_task_role(self, role: iam.Role) -> None:
        stack = cdk.Stack.of(self)
        stage = self._config.name
        policies = ssm_parameter_arn(self, f"{n.tenant_parameters_prefix(stage)}*/egress/*")
        # a tenant's tier (sandbox_common.tenant_access): a tenant off the standard tier has no egress
        substrates = ssm_parameter_arn(self, f"{n.tenant_parameters_prefix(stage)}*/substrate")
        caps = ssm_parameter_arn(self, f"{n.ssm_prefix(stage)}/caps/*")
        allow(
            role,
            "ReadEgressPoliciesTenantsAndCaps",
            ["ssm:GetParameter", "ssm:GetParameters"],
            policies,
            substrates,
            caps,
        )
        tenant_secrets = stack.format_arn(
            service="secretsmanager",
            resource="secret",
            resource_name=f"{n.PROJECT}/{stage}/tenants/*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        allow(role, "ReadTenantSecrets", ["secretsmanager:GetSecretValue"], tenant_secrets)

        def table(spec: n.TableSpec) -> str:
            return self._table_arns.get(spec.logical) or _table_arn(stack, spec.physical(stage))

        # Read a credential, bind it to its source (conditional update), count, record each connection.
        allow(
            role,
            "SessionEgressState",
            ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"],
            table(n.EGRESS),
        )
        # Only the byte counters (`{tenant}#egress_daily_bytes#{day}`): never a call counter.
        allow(
            role,
            "CountEgressBytes",
            ["dynamodb:GetItem", "dynamodb:UpdateItem"],
            table(n.TENANT_DAILY_COUNTERS),
            conditions={
                "ForAllValues:StringLike": {"dynamodb:LeadingKeys": list(egress_byte_counter_keys())}
            },
        )
        # a disabled tenant's egress closes
        allow(role, "ReadTenantPolicy", ["dynamodb:GetItem"], table(n.TENANTS))
        allow(role, "PackageIndexToken", ["codeartifact:GetAuthorizationToken"], self._index.domain_arn)
        allow(
            role,
            "PackageIndexRead",
            ["codeartifact:ReadFromRepository", "codeartifact:GetRepositoryEndpoint"],
            self._index.repository_arn,
        )
        allow(
            role,
            "PackageIndexBearerToken",
            ["sts:GetServiceBearerToken"],
            "*",
            conditions={"StringEquals": {"sts:AWSServiceName": "codeartifact.amazonaws.com"}},
        )
        self._acknowledge_task_role_wildcards(role, policies, substrates, caps, tenant_secrets)

    def _acknowledge_task_role_wildcards(
        self, role: iam.Role, policies: str, substrates: str, caps: str, tenant_secrets: str
    ) -> None:
        for finding, reason in (
            (
                "Resource::*",
                "sts:GetServiceBearerToken has no resource-level permissions (IAM requires '*'); the "
                "condition limits it to CodeArtifact tokens.",
            ),
            (
                f"Resource::{finding_arn(self, policies)}",
                "One egress policy per tenant and allowlist environment, added with the tenant's shard "
                "and replaced by `sandboxctl egress set`: all under this stage's tenants path.",
            ),
            (
                f"Resource::{finding_arn(self, substrates)}",
                "Every tenant's substrate (its tier), published by its shard stack as tenants are added: "
                "the proxy closes egress of a tenant that may not use a sandbox.",
            ),
            (
                f"Resource::{finding_arn(self, caps)}",
                "The caps and their per-tenant overrides (caps/tenants/<id>/...) operators add at run "
                "time: the proxy closes egress at a cap of 0 and counts egress_daily_bytes.",
            ),
            (
                f"Resource::{finding_arn(self, tenant_secrets)}",
                "Tenants' secrets are added at run time (`sandboxctl secrets put`); the proxy reads one "
                "only for the tenant whose policy names it, all under this stage's tenants prefix.",
            ),
        ):
            acknowledge(role, f"AwsSolutions-IAM5[{finding}]", reason)


EGRESS_BYTES_DIMENSION = "egress_daily_bytes"


def egress_byte_counter_keys() -> tuple[str, ...]:
    """The counter keys the proxy may touch: every bytes dimension's (its name is in the key)."""
    return (f"*#{EGRESS_BYTES_DIMENSION}#*",)


def _table_arn(stack: cdk.Stack, physical: str) -> str:
    return stack.format_arn(service="dynamodb", resource="table", resource_name=physical)
