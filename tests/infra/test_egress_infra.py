"""The egress path on AWS as synthesized (docs/egress.md, "On AWS"): sessions of allowlist
environments in isolated subnets whose only ways out are the proxy's load balancer and S3, the
proxy on Fargate behind an internal NLB that keeps client addresses, the sessions' DNS Firewall, the
package index, the CA, the policy store, and a proxy role that can do what the proxy does only."""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import pytest
from sandbox_common import egress_policy
from sandbox_common import naming as n

from infra.cdk.config import build_config
from infra.cdk.constructs.egress import AGENTCORE_CA_BUNDLE
from infra.cdk.constructs.egress_dns import BLOCK_EVERYTHING
from infra.cdk.constructs.egress_network import SESSION_S3_ACTIONS
from infra.cdk.constructs.egress_setup import setup_function_name
from tests.infra._cfn import (
    allowed_actions,
    as_list,
    policy_statements,
    render,
    resources,
    statement_resources,
)
from tests.infra.conftest import STAGES

INTERPRETER = "AWS::BedrockAgentCore::CodeInterpreterCustom"
Template = dict[str, Any]


def _core(all_stages, stage: str) -> Template:
    return all_stages[stage][n.stack_name(stage, "Core")]


def _shards(all_stages, stage: str) -> dict[str, Template]:
    return {k: v for k, v in all_stages[stage].items() if not k.endswith("-Core")}


def _one(template: Template, type_: str) -> tuple[str, dict[str, Any]]:
    (found,) = resources(template, type_).items()
    return found


def _subnets(core: Template, group: str) -> dict[str, dict[str, Any]]:
    """Subnet id -> properties, for one CDK subnet group (Sessions / Proxy / Public)."""
    return {
        rid: r["Properties"]
        for rid, r in resources(core, "AWS::EC2::Subnet").items()
        if {"Key": "aws-cdk:subnet-name", "Value": group} in r["Properties"]["Tags"]
    }


def _route_table_of(core: Template, subnet_id: str) -> str:
    (table,) = [
        r["Properties"]["RouteTableId"]["Ref"]
        for r in resources(core, "AWS::EC2::SubnetRouteTableAssociation").values()
        if r["Properties"]["SubnetId"] == {"Ref": subnet_id}
    ]
    return table


def _routes(core: Template, table: str) -> list[dict[str, Any]]:
    return [
        r["Properties"]
        for r in resources(core, "AWS::EC2::Route").values()
        if r["Properties"]["RouteTableId"] == {"Ref": table}
    ]


def _vpc_id(core: Template, name_suffix: str) -> str:
    (rid,) = [
        rid
        for rid, r in resources(core, "AWS::EC2::VPC").items()
        if any(t["Key"] == "Name" and t["Value"].endswith(name_suffix) for t in r["Properties"]["Tags"])
    ]
    return rid


def _allowlist_interpreters(all_stages, stage: str) -> list[tuple[Template, dict[str, Any]]]:
    return [
        (template, r["Properties"])
        for template in _shards(all_stages, stage).values()
        for r in resources(template, INTERPRETER).values()
        if r["Properties"]["NetworkConfiguration"]["NetworkMode"] == "VPC"
    ]


# --- sessions: a VPC-mode interpreter that trusts the proxy CA ----------------------------------
def test_dev_allowlist_interpreter_is_vpc_mode_with_its_own_group_and_the_proxy_ca(all_stages) -> None:
    # Given dev, whose acme declares default-allowlist
    found = _allowlist_interpreters(all_stages, "dev")
    assert [p["Name"] for _, p in found] == [n.interpreter_name("dev", "acme", "default-allowlist")]
    ((shard, props),) = found
    # Then its sessions attach to the sessions VPC's subnets, with a security group of its own
    vpc = props["NetworkConfiguration"]["VpcConfig"]
    assert vpc["Subnets"] == {"Ref": "EgressSessionSubnets"}
    (group,) = vpc["SecurityGroups"]
    assert shard["Resources"][group["Fn::GetAtt"][0]]["Type"] == "AWS::EC2::SecurityGroup"
    # And the proxy CA's certificate secret is installed in every session
    assert props["Certificates"] == [
        {"CertificateLocation": {"SecretArn": {"Ref": "EgressCaCertificateArn"}}}
    ]
    # And the shard reads those values at deploy from what the core stack publishes
    parameters = shard["Parameters"]
    assert parameters["EgressSessionSubnets"] == {
        "Type": "AWS::SSM::Parameter::Value<List<AWS::EC2::Subnet::Id>>",
        "Default": n.egress_network_parameter("dev", n.EGRESS_SESSION_SUBNETS),
        "Description": parameters["EgressSessionSubnets"]["Description"],
    }
    assert parameters["EgressCaCertificateArn"]["Default"] == n.egress_network_parameter(
        "dev", n.EGRESS_CA_CERT_ARN
    )


def test_core_publishes_what_the_shards_read(all_stages) -> None:
    core = _core(all_stages, "dev")
    params = {
        r["Properties"]["Name"]: r["Properties"] for r in resources(core, "AWS::SSM::Parameter").values()
    }
    path = lambda leaf: n.egress_network_parameter("dev", leaf)  # noqa: E731
    # Given the core stack / Then every egress parameter a shard reads is published, from its source
    assert {path(leaf) for leaf in n.EGRESS_NETWORK_PARAMETERS} <= set(params)
    sessions = _subnets(core, "Sessions")
    subnets = params[path(n.EGRESS_SESSION_SUBNETS)]
    assert subnets["Type"] == "StringList"
    assert sorted(render(p) for p in subnets["Value"]["Fn::Join"][1]) == sorted(f"<{s}>" for s in sessions)
    assert params[path(n.EGRESS_SESSIONS_VPC)]["Value"] == {"Ref": _vpc_id(core, "-sessions")}
    cert_id, _ = next(
        (rid, r)
        for rid, r in resources(core, "AWS::SecretsManager::Secret").items()
        if r["Properties"]["Name"] == n.egress_ca_cert_secret_name("dev")
    )
    assert params[path(n.EGRESS_CA_CERT_ARN)]["Value"] == {"Ref": cert_id}
    prefix_list_id, _ = _one(core, "Custom::ManagedPrefixList")
    assert params[path(n.EGRESS_S3_PREFIX_LIST)]["Value"] == {"Fn::GetAtt": [prefix_list_id, "PrefixListId"]}


def test_session_security_group_reaches_only_the_proxy_and_s3(all_stages) -> None:
    config = build_config("dev")
    assert config.egress is not None
    ((shard, props),) = _allowlist_interpreters(all_stages, "dev")
    group = shard["Resources"][
        props["NetworkConfiguration"]["VpcConfig"]["SecurityGroups"][0]["Fn::GetAtt"][0]
    ]
    # Given the interpreter's security group
    group = group["Properties"]
    # Then it accepts nothing and may open only the proxy port to the egress VPC and 443 to S3
    assert "SecurityGroupIngress" not in group
    egress = sorted(group["SecurityGroupEgress"], key=lambda r: r["FromPort"])
    assert [{k: v for k, v in r.items() if k != "Description"} for r in egress] == [
        {
            "IpProtocol": "tcp",
            "FromPort": 443,
            "ToPort": 443,
            "DestinationPrefixListId": {"Ref": "EgressS3PrefixList"},
        },
        {
            "IpProtocol": "tcp",
            "FromPort": config.egress.proxy_port,
            "ToPort": config.egress.proxy_port,
            "CidrIp": config.egress.egress_cidr,
        },
    ]
    assert group["VpcId"] == {"Ref": "EgressSessionsVpc"}
    # And no stand-alone rule opens it further
    for template in _shards(all_stages, "dev").values():
        assert not resources(template, "AWS::EC2::SecurityGroupEgress")
        assert not resources(template, "AWS::EC2::SecurityGroupIngress")


# --- the two VPCs: no way out for sessions but the peering to the proxy and S3 -----------------
@pytest.mark.parametrize("stage", STAGES)
def test_session_subnets_have_no_route_to_a_nat_or_internet_gateway(all_stages, stage: str) -> None:
    core = _core(all_stages, stage)
    config = build_config(stage)
    assert config.egress is not None
    sessions = _subnets(core, "Sessions")
    proxy_cidrs = {p["CidrBlock"] for p in _subnets(core, "Proxy").values()}
    assert len(sessions) == config.egress.availability_zones and proxy_cidrs  # the loops below run
    ((peering_id, _),) = resources(core, "AWS::EC2::VPCPeeringConnection").items()
    for subnet_id, subnet in sessions.items():
        # Given each session subnet's route table
        assert subnet["MapPublicIpOnLaunch"] is False
        routes = _routes(core, _route_table_of(core, subnet_id))
        # Then its only routes go through the peering, to the proxy subnets (no default route)
        assert {r["DestinationCidrBlock"] for r in routes} == proxy_cidrs
        for route in routes:
            assert set(route) == {"DestinationCidrBlock", "RouteTableId", "VpcPeeringConnectionId"}
            assert route["VpcPeeringConnectionId"] == {"Ref": peering_id}
    # And the sessions VPC has no internet gateway attached at all
    sessions_vpc = _vpc_id(core, "-sessions")
    attachments = [
        r["Properties"]["VpcId"] for r in resources(core, "AWS::EC2::VPCGatewayAttachment").values()
    ]
    assert {"Ref": sessions_vpc} not in attachments
    # And only the egress VPC's proxy subnets route out (through NAT); its public subnets host the
    # NAT gateways and have no way back to the sessions
    for subnet_id in _subnets(core, "Proxy"):
        default = [
            r
            for r in _routes(core, _route_table_of(core, subnet_id))
            if r["DestinationCidrBlock"] == "0.0.0.0/0"
        ]
        assert len(default) == 1 and "NatGatewayId" in default[0]
    for subnet_id in _subnets(core, "Public"):
        routes = _routes(core, _route_table_of(core, subnet_id))
        assert all("VpcPeeringConnectionId" not in r for r in routes)
    assert len(resources(core, "AWS::EC2::NatGateway")) == config.egress.nat_gateways


def test_s3_endpoint_serves_the_sessions_for_this_accounts_principals_only(all_stages) -> None:
    core = _core(all_stages, "dev")
    endpoints = [
        r["Properties"]
        for r in resources(core, "AWS::EC2::VPCEndpoint").values()
        if r["Properties"]["VpcId"] == {"Ref": _vpc_id(core, "-sessions")}
    ]
    # Given the sessions VPC's endpoints / Then there is one, S3's gateway, on the session subnets
    (s3,) = endpoints
    assert s3["VpcEndpointType"] == "Gateway" and render(s3["ServiceName"]).endswith(".s3")
    tables = {_route_table_of(core, sid) for sid in _subnets(core, "Sessions")}
    assert {t["Ref"] for t in s3["RouteTableIds"]} == tables
    # And its policy admits this account's principals for the tenant-data actions only
    (statement,) = s3["PolicyDocument"]["Statement"]
    assert statement["Effect"] == "Allow" and sorted(statement["Action"]) == sorted(SESSION_S3_ACTIONS)
    assert statement["Condition"] == {"StringEquals": {"aws:PrincipalAccount": {"Ref": "AWS::AccountId"}}}


def test_no_security_group_of_the_egress_path_keeps_the_default_allow_all_egress(all_stages) -> None:
    core = _core(all_stages, "dev")
    groups = {
        rid: r["Properties"]
        for rid, r in resources(core, "AWS::EC2::SecurityGroup").items()
        if rid.startswith("Egress")
    }
    assert groups  # the loop below must run
    for rid, group in groups.items():
        # Given each group / Then it lists its egress inline (EC2 keeps allow-all egress otherwise)
        assert group.get("SecurityGroupEgress"), rid
        assert not [r for r in group["SecurityGroupEgress"] if r.get("IpProtocol") == "-1"], rid


def test_load_balancer_accepts_only_sessions_and_the_proxy_only_its_load_balancer(all_stages) -> None:
    core = _core(all_stages, "dev")
    config = build_config("dev")
    assert config.egress is not None
    port = config.egress.proxy_port
    nlb_id, nlb = _one(core, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    (nlb_group,) = nlb["Properties"]["SecurityGroups"]
    nlb_group_id = nlb_group["Fn::GetAtt"][0]
    # Given the load balancer's group / Then sessions (the sessions VPC) reach its port, nobody else
    ingress = core["Resources"][nlb_group_id]["Properties"]["SecurityGroupIngress"]
    assert [(r["CidrIp"], r["FromPort"], r["ToPort"]) for r in ingress] == [
        (config.egress.sessions_cidr, port, port)
    ]
    # And the proxy tasks' group accepts that port from the load balancer's group and nothing else
    service = _one(core, "AWS::ECS::Service")[1]["Properties"]
    (proxy_group,) = service["NetworkConfiguration"]["AwsvpcConfiguration"]["SecurityGroups"]
    proxy_group_id = proxy_group["Fn::GetAtt"][0]
    assert "SecurityGroupIngress" not in core["Resources"][proxy_group_id]["Properties"]
    rules = [
        r["Properties"]
        for r in resources(core, "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [proxy_group_id, "GroupId"]}
    ]
    assert [(r["SourceSecurityGroupId"], r["FromPort"], r["ToPort"]) for r in rules] == [
        ({"Fn::GetAtt": [nlb_group_id, "GroupId"]}, port, port)
    ]


# --- the proxy service -------------------------------------------------------------------------
@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_proxy_runs_on_fargate_behind_an_internal_nlb_that_keeps_client_ips(all_stages, stage: str) -> None:
    core = _core(all_stages, stage)
    egress = build_config(stage).egress
    assert egress is not None
    # Given the proxy service / Then it runs the stage's task count on Fargate in the proxy subnets
    service = _one(core, "AWS::ECS::Service")[1]["Properties"]
    assert service["LaunchType"] == "FARGATE" and service["DesiredCount"] == egress.proxy_min_tasks
    awsvpc = service["NetworkConfiguration"]["AwsvpcConfiguration"]
    assert awsvpc["AssignPublicIp"] == "DISABLED"
    assert {s["Ref"] for s in awsvpc["Subnets"]} == set(_subnets(core, "Proxy"))
    assert service["DeploymentConfiguration"]["MinimumHealthyPercent"] == 100
    # And its task is ARM64, sized by the stage, with a read-only root and the proxy image asset
    task = _one(core, "AWS::ECS::TaskDefinition")[1]["Properties"]
    assert task["RuntimePlatform"] == {"CpuArchitecture": "ARM64", "OperatingSystemFamily": "LINUX"}
    assert task["RequiresCompatibilities"] == ["FARGATE"] and task["NetworkMode"] == "awsvpc"
    assert (task["Cpu"], task["Memory"]) == (str(egress.proxy_cpu), str(egress.proxy_memory_mib))
    (container,) = task["ContainerDefinitions"]
    assert container["ReadonlyRootFilesystem"] is True
    assert container["PortMappings"] == [{"ContainerPort": egress.proxy_port, "Protocol": "tcp"}]
    assert "container-assets" in json.dumps(container["Image"])
    assert container["LogConfiguration"]["LogDriver"] == "awslogs"
    # And it runs the proxy on its port, with the stage's CA, tables and package index
    args = [render(a) for a in container["Command"]]
    flags = {"--ca-from-secrets"}  # the options without a value
    assert flags <= set(args)
    rest = [a for a in args if a not in flags]
    options = dict(zip(rest[::2], rest[1::2], strict=True))
    assert (options["--listen-host"], options["--port"], options["--stage"]) == (
        "0.0.0.0",
        str(egress.proxy_port),
        stage,
    )
    tables = {
        r["Properties"]["TableName"]: f"<{rid}>" for rid, r in resources(core, "AWS::DynamoDB::Table").items()
    }
    assert options["--egress-table"] == tables[n.EGRESS.physical(stage)]
    assert options["--counters-table"] == tables[n.TENANT_DAILY_COUNTERS.physical(stage)]
    assert options["--tenants-table"] == tables[n.TENANTS.physical(stage)]
    assert options["--index-url"].endswith(f"/pypi/{n.PACKAGE_INDEX_REPOSITORY}/simple/")
    assert options["--codeartifact"] == f"{n.package_index_domain(stage)}:<AWS::AccountId>"
    # And the load balancer is an internal NLB in the proxy subnets
    nlb = _one(core, "AWS::ElasticLoadBalancingV2::LoadBalancer")[1]["Properties"]
    assert (nlb["Type"], nlb["Scheme"]) == ("network", "internal")
    assert {s["Ref"] for s in nlb["Subnets"]} == set(_subnets(core, "Proxy"))
    listener = _one(core, "AWS::ElasticLoadBalancingV2::Listener")[1]["Properties"]
    assert (listener["Protocol"], listener["Port"]) == ("TCP", egress.proxy_port)
    # And its targets (the tasks, by IP) see each session's own address: the credential binding
    _, target_group = _one(core, "AWS::ElasticLoadBalancingV2::TargetGroup")
    group = target_group["Properties"]
    assert (group["TargetType"], group["Protocol"], group["Port"]) == ("ip", "TCP", egress.proxy_port)
    attributes = {a["Key"]: a["Value"] for a in group["TargetGroupAttributes"]}
    assert attributes["preserve_client_ip.enabled"] == "true"
    # And it scales on CPU between the stage's bounds
    target = _one(core, "AWS::ApplicationAutoScaling::ScalableTarget")[1]["Properties"]
    assert (target["MinCapacity"], target["MaxCapacity"]) == (egress.proxy_min_tasks, egress.proxy_max_tasks)
    policy = _one(core, "AWS::ApplicationAutoScaling::ScalingPolicy")[1]["Properties"]
    tracking = policy["TargetTrackingScalingPolicyConfiguration"]
    assert (
        tracking["PredefinedMetricSpecification"]["PredefinedMetricType"] == "ECSServiceAverageCPUUtilization"
    )
    assert tracking["TargetValue"] == egress.proxy_cpu_target_percent


def test_prod_keeps_two_proxies_in_two_zones_and_dev_one() -> None:
    # Given the stage data / Then prod survives an AZ (two tasks, a NAT gateway per AZ), dev is small
    prod, dev = build_config("prod").egress, build_config("dev").egress
    assert prod is not None and dev is not None
    assert (prod.proxy_min_tasks, prod.nat_gateways, prod.availability_zones) == (2, 2, 2)
    assert (dev.proxy_min_tasks, dev.nat_gateways) == (1, 1)


# --- DNS: sessions resolve the proxy and S3, nothing else -------------------------------------
def test_sessions_dns_firewall_allows_the_proxy_and_s3_and_blocks_everything_else(all_stages) -> None:
    core = _core(all_stages, "dev")
    nlb_id, _ = _one(core, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    lists = {
        rid: r["Properties"] for rid, r in resources(core, "AWS::Route53Resolver::FirewallDomainList").items()
    }
    _, group = _one(core, "AWS::Route53Resolver::FirewallRuleGroup")
    rules = sorted(group["Properties"]["FirewallRules"], key=lambda r: r["Priority"])
    # Given the rule group / Then it first allows one list, then blocks "*" with NXDOMAIN
    allow, block = rules
    assert allow["Action"] == "ALLOW" and block["Action"] == "BLOCK" and block["BlockResponse"] == "NXDOMAIN"
    allowed = lists[allow["FirewallDomainListId"]["Fn::GetAtt"][0]]["Domains"]
    assert lists[block["FirewallDomainListId"]["Fn::GetAtt"][0]]["Domains"] == [BLOCK_EVERYTHING]
    # And the allowed names are the proxy's load balancer and S3's, no internet host
    assert {"Fn::GetAtt": [nlb_id, "DNSName"]} in allowed
    names = sorted(render(d) for d in allowed if "Fn::GetAtt" not in d)
    assert names == sorted(
        [
            "s3.amazonaws.com",
            "*.s3.amazonaws.com",
            "s3.<AWS::Region>.amazonaws.com",
            "*.s3.<AWS::Region>.amazonaws.com",
        ]
    )
    # And it is associated with the sessions VPC (not the egress VPC, where the proxy resolves)
    _, association = _one(core, "AWS::Route53Resolver::FirewallRuleGroupAssociation")
    assert association["Properties"]["VpcId"] == {"Ref": _vpc_id(core, "-sessions")}
    assert association["Properties"]["FirewallRuleGroupId"] == {
        "Fn::GetAtt": [_one(core, "AWS::Route53Resolver::FirewallRuleGroup")[0], "Id"]
    }


# --- the package index, the CA, the policy store -------------------------------------------------
def test_package_index_is_a_codeartifact_repository_upstream_of_public_pypi(all_stages) -> None:
    core = _core(all_stages, "dev")
    domain_id, domain = _one(core, "AWS::CodeArtifact::Domain")
    _, repository = _one(core, "AWS::CodeArtifact::Repository")
    # Given the stage's index / Then one repository of its domain reads through from public PyPI
    assert domain["Properties"]["DomainName"] == n.package_index_domain("dev")
    assert repository["Properties"]["RepositoryName"] == n.PACKAGE_INDEX_REPOSITORY
    assert repository["Properties"]["ExternalConnections"] == ["public:pypi"]
    assert repository["Properties"]["DomainName"] == {"Fn::GetAtt": [domain_id, "Name"]}


def test_dispatch_and_reaper_know_how_sessions_reach_the_egress_path(all_stages) -> None:
    core = _core(all_stages, "dev")
    nlb_id, _ = _one(core, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    functions = {
        r["Properties"]["FunctionName"]: r["Properties"]
        for r in resources(core, "AWS::Lambda::Function").values()
    }
    for logical in (n.DISPATCH, n.REAPER):
        # Given the function's environment
        env = functions[n.function_name("dev", logical)]["Environment"]["Variables"]
        # Then sessions get the load balancer's name and port, the CA bundle path and the index
        assert render(env[n.ENV_EGRESS_PROXY_URL]) == f"http://<{nlb_id}.DNSName>:8080"
        assert env[n.ENV_EGRESS_CA_BUNDLE] == AGENTCORE_CA_BUNDLE
        assert render(env[n.ENV_EGRESS_INDEX_URL]) == (
            f"https://{n.package_index_domain('dev')}-<AWS::AccountId>.d.codeartifact.<AWS::Region>"
            f".amazonaws.com/pypi/{n.PACKAGE_INDEX_REPOSITORY}/simple/"
        )


def test_ca_key_is_readable_by_the_proxy_only_and_the_certificate_by_session_runners(all_stages) -> None:
    core = _core(all_stages, "dev")
    secrets = {
        r["Properties"]["Name"]: rid for rid, r in resources(core, "AWS::SecretsManager::Secret").items()
    }
    policies = {
        r["Properties"]["SecretId"]["Ref"]: r["Properties"]["ResourcePolicy"]
        for r in resources(core, "AWS::SecretsManager::ResourcePolicy").values()
    }
    task_role = _one(core, "AWS::ECS::TaskDefinition")[1]["Properties"]["TaskRoleArn"]
    # Given the key secret's own policy / Then every principal but the proxy's task role is denied it
    (deny,) = policies[secrets[n.egress_ca_key_secret_name("dev")]]["Statement"]
    assert (deny["Effect"], deny["Principal"], deny["Action"]) == (
        "Deny",
        {"AWS": "*"},
        "secretsmanager:GetSecretValue",
    )
    assert deny["Condition"] == {"StringNotEquals": {"aws:PrincipalArn": task_role}}
    # And the certificate has no resource policy: the stage's runner role reads it by its own policy
    # (AgentCore reads a `certificates` secret with the caller's credentials), nobody else is given it
    assert secrets[n.egress_ca_cert_secret_name("dev")] not in policies
    roles = {
        r["Properties"]["RoleName"]: rid
        for rid, r in resources(core, "AWS::IAM::Role").items()
        if "RoleName" in r["Properties"]
    }
    (setup_role,) = [
        r["Properties"]["Role"]["Fn::GetAtt"][0]
        for r in resources(core, "AWS::Lambda::Function").values()
        if r["Properties"]["FunctionName"] == setup_function_name("dev")
    ]
    certificate = f"<{secrets[n.egress_ca_cert_secret_name('dev')]}>"
    readers = {
        owner
        for owner, st in policy_statements(core)
        if certificate in statement_resources(st) and "secretsmanager:GetSecretValue" in allowed_actions(st)
    }
    assert readers == {roles[n.runner_role_name("dev")], task_role["Fn::GetAtt"][0], setup_role}
    # And the custom resource that makes the CA is given both secrets, before any proxy task starts
    ca_id, ca = _one(core, "Custom::EgressCa")
    _, service = _one(core, "AWS::ECS::Service")
    assert ca_id in service["DependsOn"]
    assert ca["Properties"]["CertSecretArn"] == {"Ref": secrets[n.egress_ca_cert_secret_name("dev")]}
    assert ca["Properties"]["KeySecretArn"] == {"Ref": secrets[n.egress_ca_key_secret_name("dev")]}


def test_policy_store_one_parameter_per_tenant_allowlist_environment(all_stages) -> None:
    config = build_config("dev")
    expected = {
        n.egress_policy_parameter("dev", t.id, env): t.initial_policy(env).to_json()
        for t in config.tenants
        for env in t.allowlist_environments
    }
    assert expected  # dev declares one
    # Given every shard's parameters / Then each allowlist environment has its policy, as config says
    found = {
        r["Properties"]["Name"]: r["Properties"]["Value"]
        for template in _shards(all_stages, "dev").values()
        for r in resources(template, "AWS::SSM::Parameter").values()
        if "/egress/" in r["Properties"]["Name"]
    }
    assert found == expected
    # And dev's starts empty: nothing is allowed until `sandboxctl egress set`
    assert egress_policy.parse_policy(next(iter(found.values()))) == egress_policy.EMPTY_ALLOWLIST


def test_a_configured_policy_is_stored_as_parsed(tmp_path) -> None:
    from infra.cdk.app_factory import synth_stage

    # Given a tenant with secrets and an initial policy with a credential and packages
    tenant = {
        "id": "acme",
        "environments": ["default-allowlist"],
        "templates": {"allowlisted": "default-allowlist"},
        "secrets": ["crm-token"],
        "egress": {
            "default-allowlist": {
                "allow": [
                    {
                        "host": "API.Example.com",
                        "credential": {"header": "Authorization", "template": "Bearer {secret:crm-token}"},
                    },
                    "*.example.org",
                ],
                "packages": ["Tabulate==0.9.0"],
            }
        },
    }
    templates = synth_stage("dev", overrides={"tenants": (tenant,)})
    (shard,) = [t for name, t in templates.items() if not name.endswith("-Core")]
    (stored,) = [
        r["Properties"]["Value"]
        for r in resources(shard, "AWS::SSM::Parameter").values()
        if r["Properties"]["Name"] == n.egress_policy_parameter("dev", "acme", "default-allowlist")
    ]
    # Then the store holds the normalized policy the proxy parses back to the same rules
    policy = egress_policy.parse_policy(stored)
    assert policy.rule_for("api.example.com", 443) is not None and policy.secrets == ("crm-token",)
    assert policy.rule_for("www.example.org", 443) is not None and policy.rule_for("evil.com", 443) is None
    assert [str(p) for p in policy.packages] == ["tabulate==0.9.0"]


# --- least privilege -------------------------------------------------------------------------
# What functions/egress_proxy calls (its store, sandbox_common.tenant_access and cap_values).
PROXY_ACTIONS = {
    "ssm:GetParameter",
    "ssm:GetParameters",
    "secretsmanager:GetSecretValue",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "codeartifact:GetAuthorizationToken",
    "codeartifact:ReadFromRepository",
    "codeartifact:GetRepositoryEndpoint",
    "sts:GetServiceBearerToken",
}
# The only '*' resources of the egress path's roles, each an action IAM has no resource for.
STAR_ACTIONS = {"sts:GetServiceBearerToken", "ecr:GetAuthorizationToken", "ec2:DescribeManagedPrefixLists"}


def _role_statements(core: Template, role_id: str) -> list[dict[str, Any]]:
    return [st for owner, st in policy_statements(core) if owner == role_id]


def test_proxy_task_role_grants_only_what_the_proxy_does(all_stages) -> None:
    core = _core(all_stages, "dev")
    role_id = _one(core, "AWS::ECS::TaskDefinition")[1]["Properties"]["TaskRoleArn"]["Fn::GetAtt"][0]
    statements = _role_statements(core, role_id)
    assert statements  # the loops below must run
    actions = {a for st in statements for a in allowed_actions(st)}
    # Given the task role / Then its actions are exactly the proxy's, none a wildcard
    assert actions == PROXY_ACTIONS
    by_sid = {st["Sid"]: st for st in statements}
    # And each reaches only its own resources
    assert sorted(statement_resources(by_sid["ReadTenantSecrets"])) == [
        "arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:secret:thinkwork/dev/tenants/*"
    ]
    assert sorted(
        r.rsplit(":parameter", 1)[1] for r in statement_resources(by_sid["ReadEgressPoliciesTenantsAndCaps"])
    ) == [
        "/thinkwork/dev/sandbox/caps/*",
        "/thinkwork/dev/sandbox/tenants/*/egress/*",
        "/thinkwork/dev/sandbox/tenants/*/substrate",
    ]
    tables = {r["Properties"]["TableName"]: rid for rid, r in resources(core, "AWS::DynamoDB::Table").items()}
    assert statement_resources(by_sid["SessionEgressState"]) == [f"<{tables[n.EGRESS.physical('dev')]}.Arn>"]
    counters = by_sid["CountEgressBytes"]
    assert statement_resources(counters) == [f"<{tables[n.TENANT_DAILY_COUNTERS.physical('dev')]}.Arn>"]
    assert statement_resources(by_sid["ReadTenantPolicy"]) == [f"<{tables[n.TENANTS.physical('dev')]}.Arn>"]
    assert counters["Condition"] == {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["*#egress_daily_bytes#*"]}
    }
    assert sorted(as_list(counters["Action"])) == ["dynamodb:GetItem", "dynamodb:UpdateItem"]
    assert as_list(by_sid["ReadTenantPolicy"]["Action"]) == ["dynamodb:GetItem"]
    # And the call counters' keys (`{tenant}#{day}`) are outside what the byte-counter grant matches
    pattern = counters["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"][0]
    assert fnmatch.fnmatchcase("acme#egress_daily_bytes#2026-11-21", pattern)
    assert not fnmatch.fnmatchcase("acme#2026-11-21", pattern)
    assert not fnmatch.fnmatchcase("acme#agent-7#2026-11-21T08", pattern)


def test_egress_roles_use_star_only_where_iam_has_no_resource(all_stages) -> None:
    core = _core(all_stages, "dev")
    roles = {rid for rid in resources(core, "AWS::IAM::Role") if rid.startswith("Egress")}
    assert len(roles) >= 4  # flow logs, setup, task, task execution
    for owner, st in policy_statements(core):
        if owner not in roles:
            continue
        # Given each statement of the egress path's roles
        if "*" in statement_resources(st):
            # Then '*' is only for actions IAM gives no resource type, each one alone
            assert set(allowed_actions(st)) <= STAR_ACTIONS, (owner, st)
        for action in allowed_actions(st):
            assert action != "*" and not action.endswith(":*"), (owner, action)


# --- stages without the egress path ------------------------------------------------------------
def test_public_and_internal_environments_synthesize_as_before(all_stages) -> None:
    # Given staging, whose tenants declare no allowlist environment
    shards = _shards(all_stages, "staging")
    assert shards  # the loops below must run
    for template in shards.values():
        # Then its shards read nothing of the egress path and have no VPC-mode interpreter
        assert set(template.get("Parameters", {})) == {"BootstrapVersion"}
        assert not resources(template, "AWS::EC2::SecurityGroup")
        for r in resources(template, INTERPRETER).values():
            assert set(r["Properties"]["NetworkConfiguration"]) == {"NetworkMode"}
            assert "Certificates" not in r["Properties"]


def test_stage_without_egress_has_no_vpc_proxy_or_index() -> None:
    from infra.cdk.app_factory import synth_stage

    # Given a stage with egress switched off and only public/internal tenants
    tenants = build_config("staging").tenants
    templates = synth_stage("dev", overrides={"egress": None, "tenants": tenants})
    types = {r["Type"] for t in templates.values() for r in t["Resources"].values()}
    # Then nothing of the egress path is deployed (and nothing costs money at rest for it)
    assert not {
        t for t in types if t.startswith(("AWS::EC2::", "AWS::ECS::", "AWS::ElasticLoadBalancingV2::"))
    }
    assert not {
        t for t in types if t.startswith(("AWS::CodeArtifact::", "AWS::Route53Resolver::", "Custom::"))
    }
    # And dispatch tells sessions of no proxy
    core = templates[n.stack_name("dev", "Core")]
    (dispatch,) = [
        r["Properties"]
        for r in resources(core, "AWS::Lambda::Function").values()
        if r["Properties"]["FunctionName"] == n.function_name("dev", n.DISPATCH)
    ]
    assert dispatch["Environment"]["Variables"][n.ENV_EGRESS_PROXY_URL] == ""


def test_adding_an_allowlist_tenant_changes_only_its_shard() -> None:
    from infra.cdk.app_factory import synth_stage

    def tenants(count: int) -> tuple[dict[str, Any], ...]:
        return tuple(
            {
                "id": f"t-{i:03d}",
                "environments": ["default-allowlist"],
                "templates": {"a": "default-allowlist"},
            }
            for i in range(count)
        )

    # Given 3 allowlist tenants in shards of 2, and the same with a 4th appended
    before = synth_stage("dev", overrides={"tenants": tenants(3), "tenants_per_shard": 2})
    after = synth_stage("dev", overrides={"tenants": tenants(4), "tenants_per_shard": 2})
    # When the templates are compared / Then only the last shard changed: no core output or
    # export couples a tenant's VPC-mode interpreter to the core stack
    changed = {name for name in after if before.get(name) != after[name]}
    assert changed == {n.shard_stack_name("dev", 1)}
    assert not any("Export" in o for t in after.values() for o in t.get("Outputs", {}).values())


def test_synth_with_a_known_account_and_region_looks_nothing_up(tmp_path, monkeypatch) -> None:
    import json as json_

    from infra.cdk.app_factory import OFFLINE_CONTEXT, build_app

    # Given the account and region the CDK CLI passes when it has credentials
    monkeypatch.setenv("CDK_DEFAULT_ACCOUNT", "123456789012")
    monkeypatch.setenv("CDK_DEFAULT_REGION", "us-east-1")
    # When dev is synthesized
    build_app("dev", context=OFFLINE_CONTEXT, outdir=str(tmp_path)).synth()
    manifest = json_.loads((tmp_path / "manifest.json").read_text())
    # Then no context lookup is asked for (the VPCs' AZs are CloudFormation's Fn::GetAZs)
    assert manifest.get("missing") is None
    core = json_.loads((tmp_path / f"{n.stack_name('dev', 'Core')}.template.json").read_text())
    zones = [r["Properties"]["AvailabilityZone"] for r in resources(core, "AWS::EC2::Subnet").values()]
    assert zones and all("Fn::GetAZs" in json_.dumps(z) for z in zones)
