"""Create one stage's AWS resources in moto from the SAME definitions the CDK stacks use:
`naming.ALL_TABLES` (keys, GSIs, TTL, PITR), `infra.cdk.constructs.definitions` (the stage-wide SSM
parameters, each tenant's interpreter names and substrate JSON), the stage's one session-runner
role (its trust and policy), the audit DLQ, the `security-alerts` topic and the log groups.
`tests/integration/local_stack/test_matches_cdk.py` holds this module and the synthesized `local`
stage to the same shapes.
"""

from __future__ import annotations

import json
from typing import Any

from sandbox_common import naming as n
from sandbox_common.models import TenantSubstrate

from infra.cdk.config import StageConfig
from infra.cdk.constructs.definitions import (
    artifacts_bucket_settings,
    global_parameters,
    interpreter_arn_patterns,
    interpreter_names,
    runner_role_statements,
    runner_trust,
    tenant_data_statements,
    tenant_substrate,
)
from infra.local.interpreter.s3relay import DataGrant
from infra.local.state import LOCAL_ACCOUNT, LOCAL_REGION, LocalResources


def _put_new_parameter(ssm: Any, name: str, value: str) -> None:
    """Create a parameter. On a loaded machine a put can outlive the client's read timeout and be
    retried by botocore after moto applied it: finding our own value there is success."""
    try:
        ssm.put_parameter(Name=name, Type="String", Value=value)
    except ssm.exceptions.ParameterAlreadyExists:
        if ssm.get_parameter(Name=name)["Parameter"]["Value"] != value:
            raise


def create_table_request(spec: n.TableSpec, stage: str) -> dict[str, Any]:
    """boto3 `create_table` kwargs for a spec: how the local stack and the tests create exactly
    the tables the CDK state construct declares (keys, indexes; TTL is a separate call:
    `ttl_request`)."""
    keys = {spec.pk, *(k for k in (spec.sk,) if k)}
    for index in spec.indexes:
        keys.update(k for k in (index.pk, index.sk) if k)
    request: dict[str, Any] = {
        "TableName": spec.physical(stage),
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [{"AttributeName": k, "AttributeType": "S"} for k in sorted(keys)],
        "KeySchema": [{"AttributeName": spec.pk, "KeyType": "HASH"}]
        + ([{"AttributeName": spec.sk, "KeyType": "RANGE"}] if spec.sk else []),
    }
    if spec.stream:
        request["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": spec.stream}
    if spec.indexes:
        request["GlobalSecondaryIndexes"] = [
            {
                "IndexName": index.name,
                "KeySchema": [{"AttributeName": index.pk, "KeyType": "HASH"}]
                + ([{"AttributeName": index.sk, "KeyType": "RANGE"}] if index.sk else []),
                "Projection": {"ProjectionType": "ALL"},
            }
            for index in spec.indexes
        ]
    return request


def ttl_request(spec: n.TableSpec, stage: str) -> dict[str, Any] | None:
    if not spec.ttl_attribute:
        return None
    return {
        "TableName": spec.physical(stage),
        "TimeToLiveSpecification": {"Enabled": True, "AttributeName": spec.ttl_attribute},
    }


def create_resources(config: StageConfig, clients: Any, *, region: str = LOCAL_REGION) -> LocalResources:
    """`clients(service)` returns a boto3 client pointed at moto."""
    stage = config.name
    ddb, ssm, iam, sqs, sns, logs = (clients(s) for s in ("dynamodb", "ssm", "iam", "sqs", "sns", "logs"))

    tables = _create_tables(ddb, stage)

    for name, value in global_parameters(config).items():
        _put_new_parameter(ssm, name, value)

    runner_role_arn = _create_runner_role(iam, stage, region)
    interpreters = _publish_tenants(config, ssm, region, runner_role_arn)

    queue_url = sqs.create_queue(
        QueueName=n.audit_dlq_name(stage), Attributes={"MessageRetentionPeriod": "1209600"}
    )["QueueUrl"]
    topic_arn = sns.create_topic(Name=n.security_topic_name(stage))["TopicArn"]

    log_groups = [n.log_group_name(stage, logical) for logical in n.FUNCTIONS] + [
        n.findings_audit_log_group(stage)
    ]
    for group in log_groups:
        logs.create_log_group(logGroupName=group)
        logs.put_retention_policy(logGroupName=group, retentionInDays=config.log_retention_days)

    artifacts_bucket, data_bucket = create_buckets(config, clients("s3"))

    return LocalResources(
        stage=stage,
        region=region,
        account=LOCAL_ACCOUNT,
        tables=tables,
        functions={logical: n.function_name(stage, logical) for logical in n.FUNCTIONS},
        audit_dlq_url=queue_url,
        security_topic_arn=topic_arn,
        interpreters=interpreters,
        runner_role=runner_role_arn,
        log_groups=log_groups,
        artifacts_bucket=artifacts_bucket,
        data_bucket=data_bucket,
    )


def _create_tables(ddb: Any, stage: str) -> dict[str, str]:
    """Every table as the CDK stack defines it (keys, indexes, TTL, point-in-time recovery)."""
    tables = {}
    for spec in n.ALL_TABLES:
        ddb.create_table(**create_table_request(spec, stage))
        ttl = ttl_request(spec, stage)
        if ttl:
            ddb.update_time_to_live(**ttl)
        if spec.pitr:
            ddb.update_continuous_backups(
                TableName=spec.physical(stage),
                PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
            )
        tables[spec.logical] = spec.physical(stage)
    return tables


def _create_runner_role(iam: Any, stage: str, region: str) -> str:
    """The session-runner role dispatch and the reaper assume per tenant; its ARN."""
    dispatch_role_arn = f"arn:aws:iam::{LOCAL_ACCOUNT}:role/{n.function_role_name(stage, n.DISPATCH)}"
    reaper_role_arn = f"arn:aws:iam::{LOCAL_ACCOUNT}:role/{n.function_role_name(stage, n.REAPER)}"
    # The same trust and policy the CDK stack gives the runner role (one definition).
    runner_role = iam.create_role(
        RoleName=n.runner_role_name(stage),
        AssumeRolePolicyDocument=json.dumps(runner_trust({"AWS": [dispatch_role_arn, reaper_role_arn]})),
    )["Role"]
    patterns = interpreter_arn_patterns(stage, partition="aws", region=region, account=LOCAL_ACCOUNT)
    iam.put_role_policy(
        RoleName=runner_role["RoleName"],
        PolicyName="StageInterpreters",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": runner_role_statements(patterns)}),
    )
    return str(runner_role["Arn"])


def _publish_tenants(
    config: StageConfig, ssm: Any, region: str, runner_role_arn: str
) -> list[dict[str, str]]:
    """Each tenant's substrate and allowlist egress policies in SSM; its interpreters, to register."""
    interpreters: list[dict[str, str]] = []
    for tenant in config.tenants:
        ids = interpreter_names(config, tenant)
        arns = {env: local_interpreter_arn(i, region=region) for env, i in ids.items()}
        # Validated through the model dispatch reads it with, so a drift fails here first.
        substrate = TenantSubstrate.model_validate(
            tenant_substrate(
                config, tenant, interpreters=ids, interpreter_arns=arns, runner_role_arn=runner_role_arn
            )
        )
        ssm.put_parameter(
            Name=n.tenant_substrate_parameter(config.name, tenant.id),
            Type="String",
            Value=substrate.model_dump_json(),
        )
        # The environment's egress policy store, as the tenant construct writes it from the config
        # (`sandboxctl egress set` replaces it at run time).
        for env in tenant.environments:
            if n.EGRESS_MODE[env] == "allowlist":
                _put_new_parameter(
                    ssm,
                    n.egress_policy_parameter(config.name, tenant.id, env),
                    tenant.initial_policy(env).to_json(),
                )
        for environment, interpreter_id in ids.items():
            interpreters.append(
                {
                    "tenant_id": tenant.id,
                    "environment": environment,
                    "id": interpreter_id,
                    "arn": arns[environment],
                    "network_mode": n.NETWORK_MODE[environment],
                }
            )
    return interpreters


def local_interpreter_arn(interpreter_id: str, *, region: str = LOCAL_REGION) -> str:
    """A local interpreter's ARN, shaped as AgentCore shapes a custom interpreter's."""
    return f"arn:aws:bedrock-agentcore:{region}:{LOCAL_ACCOUNT}:code-interpreter-custom/{interpreter_id}"


def data_grants(config: StageConfig, s3_endpoint: str, region: str = LOCAL_REGION) -> dict[str, DataGrant]:
    """interpreter id -> what its sessions may read of the emulated S3: the IAM statements the
    tenant's interpreter execution roles get on AWS, one definition for both."""
    grants = {}
    for tenant in config.tenants:
        statements = tuple(tenant_data_statements(tenant))
        if statements:
            for interpreter_id in interpreter_names(config, tenant).values():
                grants[interpreter_id] = DataGrant(s3_endpoint, statements, region)
    return grants


def create_buckets(config: StageConfig, s3: Any) -> tuple[str, str]:
    """The artifacts bucket (settings from the CDK definition) and the demo tenant-data bucket."""
    settings = artifacts_bucket_settings(config)
    artifacts = n.artifacts_bucket_name(config.name, LOCAL_ACCOUNT)
    s3.create_bucket(Bucket=artifacts)
    s3.put_bucket_encryption(
        Bucket=artifacts,
        ServerSideEncryptionConfiguration={
            "Rules": [
                {
                    "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": settings["sse_algorithm"]},
                    "BucketKeyEnabled": True,
                }
            ]
        },
    )
    s3.put_public_access_block(
        Bucket=artifacts, PublicAccessBlockConfiguration=settings["block_public_access"]
    )
    s3.put_bucket_lifecycle_configuration(
        Bucket=artifacts,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "ExpireWithAuditRetention",
                    "Status": "Enabled",
                    "Filter": {"Prefix": ""},
                    "Expiration": {"Days": settings["expiration_days"]},
                }
            ]
        },
    )
    data = n.demo_data_bucket_name(config.name)
    s3.create_bucket(Bucket=data)
    s3.put_public_access_block(Bucket=data, PublicAccessBlockConfiguration=settings["block_public_access"])
    return artifacts, data
