"""The stage's artifacts bucket: where collected artifacts are stored.

SSE-KMS with a key of its own (rotated), public access blocked, TLS only, versioning off (an
artifact is written once), lifecycle expiry = the audit retention, so an artifact never outlives
the audit row that names it; server access logs go to a log bucket of their own. Dispatch gets
exactly PutObject + GetObject on it (and the key's use for those) — no List, no Delete; the
reaper, which stores the files of background jobs whose end it observes, PutObject alone.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct
from sandbox_common import limits
from sandbox_common import naming as n

from infra.cdk.config import StageConfig
from infra.cdk.constructs.definitions import artifacts_bucket_settings
from infra.cdk.constructs.grants import allow
from infra.cdk.constructs.nag import acknowledge
from infra.cdk.constructs.state import ALWAYS_RETAINED, removal_policy

# What dispatch does with artifacts: put (collect) and get (the get_file pointer; presigned GETs
# are signed with its credentials, so the URL can read only what dispatch may read).
DISPATCH_ARTIFACT_ACTIONS: tuple[str, ...] = ("s3:PutObject", "s3:GetObject")
DISPATCH_KEY_ACTIONS: tuple[str, ...] = ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey")
# What the reaper does with artifacts: store the files of a background job whose end it observed.
REAPER_ARTIFACT_ACTIONS: tuple[str, ...] = ("s3:PutObject",)
REAPER_KEY_ACTIONS: tuple[str, ...] = ("kms:Encrypt", "kms:GenerateDataKey")


class ArtifactsConstruct(Construct):
    """Attributes: `bucket`, `key`, `access_logs`."""

    def __init__(self, scope: Construct, id_: str, *, config: StageConfig) -> None:
        super().__init__(scope, id_)
        self._config = config
        self.key = kms.Key(
            self,
            "Key",
            description=f"Thinkwork sandbox artifacts ({config.name})",
            enable_key_rotation=True,
            removal_policy=ALWAYS_RETAINED,
        )
        self.access_logs = self._build_access_logs()
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            bucket_name=n.artifacts_bucket_name(config.name, cdk.Aws.ACCOUNT_ID),
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            bucket_key_enabled=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=False,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireWithAuditRetention",
                    expiration=cdk.Duration.days(artifacts_bucket_settings(config)["expiration_days"]),
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(1),
                )
            ],
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="artifacts/",
            removal_policy=ALWAYS_RETAINED,
        )

    def _build_access_logs(self) -> s3.Bucket:
        logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,  # the log delivery service cannot use SSE-KMS
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireAccessLogs", expiration=cdk.Duration.days(limits.FINDINGS_RETENTION_DAYS)
                )
            ],
            removal_policy=removal_policy(self._config),
        )
        acknowledge(
            logs,
            "AwsSolutions-S1",
            "This bucket IS the server access log destination of the artifacts bucket; logging its own "
            "access would log the log writes themselves.",
        )
        return logs

    def grant_dispatch(self, role: iam.IRole) -> None:
        self._grant(role, "ArtifactsPutGet", DISPATCH_ARTIFACT_ACTIONS, DISPATCH_KEY_ACTIONS)

    def grant_reaper(self, role: iam.IRole) -> None:
        self._grant(role, "ArtifactsPut", REAPER_ARTIFACT_ACTIONS, REAPER_KEY_ACTIONS)

    def _grant(
        self, role: iam.IRole, sid: str, object_actions: tuple[str, ...], key_actions: tuple[str, ...]
    ) -> None:
        allow(role, sid, object_actions, self.bucket.arn_for_objects("*"))
        allow(role, "ArtifactsKey", key_actions, self.key.key_arn)
        stack = cdk.Stack.of(self)
        bucket_id = stack.get_logical_id(self.bucket.node.default_child)  # type: ignore[arg-type]
        acknowledge(
            role,
            f"AwsSolutions-IAM5[Resource::<{bucket_id}.Arn>/*]",
            "Artifacts are written and read at {tenant}/{turn}/{invocation}/{filename}, keys known only at "
            "run time; dispatch may only Put and Get objects of this one bucket, the reaper only Put (no "
            "List, no Delete).",
        )
