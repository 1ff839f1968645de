"""DynamoDB state of one stage (every table in naming.ALL_TABLES) and the audit dead-letter queue.

The audit table is append-only: its resource policy denies every in-place write to
every principal, and function roles only ever get a conditional PutItem. TTL expiry is performed
by DynamoDB itself, outside IAM, so it stays the only deletion path.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from sandbox_common import naming as n

from infra.cdk.config import StageConfig
from infra.cdk.constructs.nag import acknowledge

# Writes that would change or remove an existing audit row. PutItem stays allowed: it is how rows
# are appended. IAM cannot require a ConditionExpression, so "never overwrite" rests on the writer
# (sandbox_common.audit always sends attribute_not_exists) and on only the dispatch role holding
# PutItem; an account admin could still overwrite a row with a bare PutItem (runbook: residual risks).
AUDIT_DENIED_ACTIONS: tuple[str, ...] = (
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:PartiQLUpdate",
    "dynamodb:PartiQLDelete",
    "dynamodb:PartiQLInsert",
)


def removal_policy(config: StageConfig) -> cdk.RemovalPolicy:
    return cdk.RemovalPolicy.RETAIN if config.removal_policy == "retain" else cdk.RemovalPolicy.DESTROY


# What `cdk destroy` keeps in every stage, whatever its removal policy: the audit trail (an
# append-only record no principal may delete must not vanish with the stack), the artifacts bucket
# (tenants' outputs, kept as long as the audit rows that name them) and the key that encrypts it
# (without it the kept artifacts could never be read). docs/deploy.md says how to remove them.
ALWAYS_RETAINED = cdk.RemovalPolicy.RETAIN


class StateConstruct(Construct):
    """Attributes: `tables` (TableSpec.logical -> Table), `audit_dlq`."""

    def __init__(self, scope: Construct, id_: str, *, config: StageConfig) -> None:
        super().__init__(scope, id_)
        self._config = config
        self.tables: dict[str, dynamodb.Table] = {
            spec.logical: self._build_table(spec) for spec in n.ALL_TABLES
        }
        self.audit_dlq = self._build_audit_dlq()

    @property
    def table_names(self) -> dict[str, str]:
        return {logical: table.table_name for logical, table in self.tables.items()}

    def _build_table(self, spec: n.TableSpec) -> dynamodb.Table:
        physical = spec.physical(self._config.name)
        table = dynamodb.Table(
            self,
            _construct_id(spec.logical),
            table_name=physical,
            partition_key=dynamodb.Attribute(name=spec.pk, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=spec.sk, type=dynamodb.AttributeType.STRING)
            if spec.sk
            else None,
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=spec.pitr
            ),
            time_to_live_attribute=spec.ttl_attribute,
            stream=dynamodb.StreamViewType(spec.stream) if spec.stream else None,
            removal_policy=ALWAYS_RETAINED if spec is n.INVOCATIONS else removal_policy(self._config),
            resource_policy=self._audit_resource_policy(physical) if spec is n.INVOCATIONS else None,
        )
        for index in spec.indexes:
            table.add_global_secondary_index(
                index_name=index.name,
                partition_key=dynamodb.Attribute(name=index.pk, type=dynamodb.AttributeType.STRING),
                sort_key=dynamodb.Attribute(name=index.sk, type=dynamodb.AttributeType.STRING)
                if index.sk
                else None,
                projection_type=dynamodb.ProjectionType.ALL,
            )
        return table

    @staticmethod
    def _audit_resource_policy(physical_name: str) -> iam.PolicyDocument:
        # The table's own ARN cannot be referenced from its own policy (circular); the physical
        # name is fixed, so the ARN is spelled out instead of a blanket "*".
        table_arn = cdk.Fn.sub(
            f"arn:${{AWS::Partition}}:dynamodb:${{AWS::Region}}:${{AWS::AccountId}}:table/{physical_name}"
        )
        return iam.PolicyDocument(
            statements=[
                iam.PolicyStatement(
                    sid="AuditRowsAreAppendOnly",
                    effect=iam.Effect.DENY,
                    principals=[iam.AnyPrincipal()],
                    actions=list(AUDIT_DENIED_ACTIONS),
                    resources=[table_arn],
                )
            ]
        )

    def _build_audit_dlq(self) -> sqs.Queue:
        return failure_queue(
            self,
            "AuditDlq",
            name=n.audit_dlq_name(self._config.name),
            config=self._config,
            why_no_dlq="This queue IS the audit dead-letter destination: dispatch sends a row here after its "
            "retries fail and `sandboxctl audit replay` drains it; a DLQ of a DLQ would add nothing.",
        )


def failure_queue(
    scope: Construct, cid: str, *, name: str, config: StageConfig, why_no_dlq: str
) -> sqs.Queue:
    """A queue where failed work waits (encrypted, SSL-only, 14 days, stage removal policy).
    It is itself the last stop, so cdk-nag's "queue without a DLQ" finding is acknowledged."""
    queue = sqs.Queue(
        scope,
        cid,
        queue_name=name,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=cdk.Duration.days(14),
        removal_policy=removal_policy(config),
    )
    acknowledge(queue, "AwsSolutions-SQS3", why_no_dlq)
    return queue


def _construct_id(logical: str) -> str:
    return "".join(part.capitalize() for part in logical.replace("-", "_").split("_"))
