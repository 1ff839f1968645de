"""One source of truth: the local stack's resources and the synthesized `local` stage agree on
table names/keys/GSIs/TTL/PITR, SSM parameter names, and each function's handler, timeout,
environment variable names and every non-token value."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest
from sandbox_common import naming as n

from infra.cdk.config import build_config
from infra.local.resources import create_resources
from infra.local.stack import lambda_function_specs
from infra.local.state import LocalResources

LOCAL_ONLY_ENV = {
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE",
    "AWS_ENDPOINT_URL_LAMBDA",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
}
# Where an allowlist session meets the egress path differs by design: on AWS the proxy's load
# balancer and the OS trust store AgentCore fills from `certificates`; locally the relay port inside
# the bubblewrap sandbox and the CA bound into it (`local up` sets them). The names must match.
EGRESS_ENDPOINT_ENV = {n.ENV_EGRESS_PROXY_URL, n.ENV_EGRESS_CA_BUNDLE, n.ENV_EGRESS_INDEX_URL}
# The sessions VPC's facts the core stack publishes for the tenant shards: a VPC, its subnets, the
# S3 prefix list and the CA secret have no local counterpart (local sessions are namespaces).
AWS_NETWORK_PARAMETERS = {n.egress_network_parameter("local", leaf) for leaf in n.EGRESS_NETWORK_PARAMETERS}


@pytest.fixture(scope="module")
def templates(synth: Callable[[str], dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    return synth("local")


@pytest.fixture
def local(moto_endpoint: str) -> tuple[LocalResources, Any]:
    def client(service: str) -> Any:
        return boto3.client(service, endpoint_url=moto_endpoint)

    return create_resources(build_config("local"), client), client


def _resources(templates: dict[str, dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [
        r["Properties"]
        for t in templates.values()
        for r in t.get("Resources", {}).values()
        if r["Type"] == kind
    ]


def test_tables_match_the_synthesized_stage(
    templates: dict[str, dict[str, Any]], local: tuple[LocalResources, Any]
) -> None:
    # Given the synthesized tables, by physical name
    cdk_tables = {p["TableName"]: p for p in _resources(templates, "AWS::DynamoDB::Table")}
    resources, client = local
    ddb = client("dynamodb")
    # When each local table is described
    for logical, physical in resources.tables.items():
        described = ddb.describe_table(TableName=physical)["Table"]
        cdk = cdk_tables[physical]
        # Then names, key schemas, GSIs, TTL attribute and PITR are the same
        assert described["KeySchema"] == cdk["KeySchema"], logical
        assert sorted(described["AttributeDefinitions"], key=lambda a: a["AttributeName"]) == sorted(
            cdk["AttributeDefinitions"], key=lambda a: a["AttributeName"]
        ), logical
        local_gsis = {g["IndexName"]: g["KeySchema"] for g in described.get("GlobalSecondaryIndexes", [])}
        cdk_gsis = {g["IndexName"]: g["KeySchema"] for g in cdk.get("GlobalSecondaryIndexes", [])}
        assert local_gsis == cdk_gsis, logical
        local_stream = described.get("StreamSpecification", {}).get("StreamViewType")
        assert local_stream == cdk.get("StreamSpecification", {}).get("StreamViewType"), logical
        ttl = ddb.describe_time_to_live(TableName=physical)["TimeToLiveDescription"].get("AttributeName")
        assert ttl == cdk.get("TimeToLiveSpecification", {}).get("AttributeName"), logical
        pitr = ddb.describe_continuous_backups(TableName=physical)["ContinuousBackupsDescription"]
        local_pitr = pitr["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] == "ENABLED"
        assert local_pitr == bool(
            cdk.get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled")
        )
    assert set(resources.tables.values()) == set(cdk_tables)


def test_ssm_parameters_match_the_synthesized_stage(
    templates: dict[str, dict[str, Any]], local: tuple[LocalResources, Any]
) -> None:
    # Given the synthesized SSM parameters under the stage prefix (literal names and values)
    prefix = n.ssm_prefix("local")
    synthesized = {
        p["Name"]: p["Value"]
        for p in _resources(templates, "AWS::SSM::Parameter")
        if str(p["Name"]).startswith(prefix)
    }
    assert AWS_NETWORK_PARAMETERS <= set(synthesized)  # the stage publishes them; they are left out below
    cdk = {name: value for name, value in synthesized.items() if name not in AWS_NETWORK_PARAMETERS}
    _, client = local
    # When the local parameters are listed
    ssm = client("ssm")
    pages = ssm.get_paginator("get_parameters_by_path").paginate(Path=prefix, Recursive=True)
    here = {p["Name"]: p["Value"] for page in pages for p in page["Parameters"]}
    # Then the same names exist, with the same value wherever the template's value is a literal
    assert set(here) == set(cdk)
    for name, value in cdk.items():
        if isinstance(value, str):
            assert here[name] == value, name


def test_functions_match_the_synthesized_stage(
    templates: dict[str, dict[str, Any]], local: tuple[LocalResources, Any]
) -> None:
    # Given the synthesized functions, by physical name
    cdk_functions = {
        p["FunctionName"]: p for p in _resources(templates, "AWS::Lambda::Function") if "FunctionName" in p
    }
    resources, _ = local
    # When the emulator's definitions are built (what `local up` starts the workers with)
    specs = lambda_function_specs(build_config("local"), resources, {k: "x" for k in LOCAL_ONLY_ENV})
    for spec in specs:
        cdk = cdk_functions[spec["name"]]
        env = {k: v for k, v in spec["environment"].items() if k not in LOCAL_ONLY_ENV}
        cdk_env = cdk.get("Environment", {}).get("Variables", {})
        # Then handler, timeout, env var names and every literal env value are the same
        assert spec["handler"] == cdk["Handler"]
        assert spec["timeout_seconds"] == cdk["Timeout"]
        assert set(env) == set(cdk_env), spec["name"]
        for key, value in cdk_env.items():
            if isinstance(value, str) and key not in EGRESS_ENDPOINT_ENV:
                assert env[key] == value, (spec["name"], key)
    assert {s["name"] for s in specs} == {resources.functions[f] for f in n.FUNCTIONS}


def test_queue_topic_roles_and_log_groups_match_the_synthesized_stage(
    templates: dict[str, dict[str, Any]], local: tuple[LocalResources, Any]
) -> None:
    # Given the synthesized queue, topic, runner roles and log groups
    queues = {p.get("QueueName") for p in _resources(templates, "AWS::SQS::Queue")}
    topics = {p.get("TopicName") for p in _resources(templates, "AWS::SNS::Topic")}
    roles = {p.get("RoleName") for p in _resources(templates, "AWS::IAM::Role")}
    groups = {p.get("LogGroupName") for p in _resources(templates, "AWS::Logs::LogGroup")}
    resources, _ = local
    # When the local ones are compared by name
    # Then each local resource has a synthesized twin
    assert resources.audit_dlq_url.rsplit("/", 1)[1] in queues
    assert resources.security_topic_arn.rsplit(":", 1)[1] in topics
    assert resources.runner_role.rsplit("/", 1)[1] in roles
    assert set(resources.log_groups) <= groups, set(resources.log_groups) - groups


def test_runner_role_trust_and_policy_match_the_synthesized_stage(
    templates: dict[str, dict[str, Any]], local: tuple[LocalResources, Any]
) -> None:
    import json

    # Given the synthesized runner role and the local one (moto's IAM)
    (cdk_role,) = [
        p for p in _resources(templates, "AWS::IAM::Role") if p.get("RoleName") == n.runner_role_name("local")
    ]
    resources, client = local
    iam = client("iam")
    name = resources.runner_role.rsplit("/", 1)[1]
    local_trust = iam.get_role(RoleName=name)["Role"]["AssumeRolePolicyDocument"]
    local_policy = iam.get_role_policy(RoleName=name, PolicyName="StageInterpreters")["PolicyDocument"]
    local_policy = json.loads(local_policy) if isinstance(local_policy, str) else local_policy
    (cdk_statement,) = cdk_role["AssumeRolePolicyDocument"]["Statement"]
    (local_statement,) = local_trust["Statement"]
    (cdk_policy,) = cdk_role["Policies"]
    # Then the trust conditions and actions, and the policy's actions, are the same definitions;
    # the local policy names the local stage's interpreters by the same name prefix
    assert local_statement["Condition"] == cdk_statement["Condition"]
    assert local_statement["Action"] == cdk_statement["Action"]
    assert [s["Action"] for s in local_policy["Statement"]] == [
        s["Action"] for s in cdk_policy["PolicyDocument"]["Statement"]
    ]
    resources_ = [r for s in local_policy["Statement"] for r in s["Resource"]]
    assert resources_ and all(r.endswith(f"/{n.interpreter_name_prefix('local')}*") for r in resources_)
