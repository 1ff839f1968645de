"""What the egress path needs made at deploy (docs/egress.md, "On AWS"): the proxy's CA in two
Secrets Manager secrets, and the id of the region's S3 managed prefix list, both by one custom
resource Lambda (`functions/egress_setup`, Python and `cryptography` from a pip-built layer: no
Docker). The tenant shards read the CA certificate's ARN and the prefix list id from SSM.

Who reads what: the certificate is public material, readable by the stage's session-runner role
(AgentCore fetches a `certificates` entry with the caller's credentials); the key is readable by
the proxy's task role only, which the key secret's resource policy enforces against every other
principal of the account.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_ssm as ssm
from constructs import Construct
from sandbox_common import naming as n

from infra.cdk.config import EgressStage, StageConfig
from infra.cdk.constructs.compute import FUNCTIONS_DIR, other_packages, stage_log_group
from infra.cdk.constructs.grants import allow
from infra.cdk.constructs.layer import ASSET_EXCLUDES, architecture, runtime
from infra.cdk.constructs.nag import acknowledge
from infra.cdk.constructs.state import removal_policy
from infra.cdk.layer_build import REPO_ROOT, deps_layer_code

SETUP_PACKAGE = "egress_setup"
SETUP_REQUIREMENTS = REPO_ROOT / "layers" / "egress_setup" / "requirements.txt"
# What the secrets hold until the custom resource writes the CA (CloudFormation needs a value).
PLACEHOLDER = "not yet written: the egress setup custom resource writes the CA at deploy"
CA_RESOURCE_TYPE = "Custom::EgressCa"
PREFIX_LIST_RESOURCE_TYPE = "Custom::ManagedPrefixList"


def setup_function_name(stage: str) -> str:
    return f"{n.PROJECT}-{stage}-egress-setup"


class EgressSetupConstruct(Construct):
    """Attributes: `cert_secret`, `key_secret` (CfnSecret), `function`, `ca` and `s3_prefix_list`
    (CustomResource), `s3_prefix_list_id` (token), `parameters` (naming leaf -> StringParameter)."""

    def __init__(self, scope: Construct, id_: str, *, config: StageConfig, egress: EgressStage) -> None:
        super().__init__(scope, id_)
        self._config = config
        self._egress = egress
        self.cert_secret = self._build_secret(
            "CaCertificate", n.egress_ca_cert_secret_name(config.name), "certificate (PEM)"
        )
        self.key_secret = self._build_secret(
            "CaKey", n.egress_ca_key_secret_name(config.name), "private key (PEM)"
        )
        self.function = self._build_function()
        self.ca = cdk.CustomResource(
            self,
            "Ca",
            service_token=self.function.function_arn,
            resource_type=CA_RESOURCE_TYPE,
            properties={
                "CertSecretArn": self.cert_secret.ref,
                "KeySecretArn": self.key_secret.ref,
                "CommonName": f"Thinkwork sandbox egress CA ({config.name})",
                "ValidityDays": str(egress.ca_validity_days),
            },
        )
        self.s3_prefix_list = cdk.CustomResource(
            self,
            "S3PrefixList",
            service_token=self.function.function_arn,
            resource_type=PREFIX_LIST_RESOURCE_TYPE,
            properties={"PrefixListName": f"com.amazonaws.{cdk.Aws.REGION}.s3"},
        )
        self.s3_prefix_list_id = self.s3_prefix_list.get_att_string("PrefixListId")
        self.parameters = self._build_parameters()

    def _build_secret(self, cid: str, name: str, what: str) -> secretsmanager.CfnSecret:
        secret = secretsmanager.CfnSecret(
            self,
            cid,
            name=name,
            description=f"Egress proxy CA {what}, stage {self._config.name}: written once at deploy",
            secret_string=PLACEHOLDER,
        )
        secret.apply_removal_policy(removal_policy(self._config))
        acknowledge(
            secret,
            "AwsSolutions-SMG4",
            "A CA is not a password: rotating it means a new CA that every session must trust before "
            "the proxy signs with it, a planned step (docs/egress.md), not a scheduled Lambda.",
        )
        return secret

    def grant_certificate_to(self, runner_role: iam.CfnRole) -> iam.CfnPolicy:
        """AgentCore reads a `certificates` secret with its caller's credentials: the stage's
        session-runner role may read the certificate (its session policy allows the same secret,
        `sandbox_common.runner_policy.ca_certificate_statement`)."""
        return iam.CfnPolicy(
            self,
            "RunnerReadsCaCertificate",
            policy_name="EgressCaCertificate",
            roles=[runner_role.ref],
            policy_document={
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Sid": "EgressCaCertificate",
                        "Effect": "Allow",
                        "Action": "secretsmanager:GetSecretValue",
                        "Resource": self.cert_secret.ref,
                    }
                ],
            },
        )

    def restrict_key_to(self, role: iam.IRole) -> None:
        """The key secret readable by `role` (the proxy's task role) and by no other principal of
        the account: an explicit deny in the secret's own policy outweighs any identity grant."""
        secretsmanager.CfnResourcePolicy(
            self,
            "CaKeyPolicy",
            secret_id=self.key_secret.ref,
            block_public_policy=True,
            resource_policy={
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Sid": "OnlyTheEgressProxyReadsTheCaKey",
                        "Effect": "Deny",
                        "Principal": {"AWS": "*"},
                        "Action": "secretsmanager:GetSecretValue",
                        "Resource": "*",
                        "Condition": {"StringNotEquals": {"aws:PrincipalArn": role.role_arn}},
                    }
                ],
            },
        )
        allow(role, "ReadTheCa", ["secretsmanager:GetSecretValue"], self.cert_secret.ref, self.key_secret.ref)

    def _build_function(self) -> lambda_.Function:
        name = setup_function_name(self._config.name)
        log_group = stage_log_group(self, "SetupLogs", f"/aws/lambda/{name}", self._config)
        role = iam.Role(
            self,
            "SetupRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Egress setup custom resource: writes the proxy CA once, reads a prefix list id",
        )
        log_group.grant_write(role)
        # The certificate is read to see whether an earlier run already made the CA; the key is only
        # ever written.
        allow(
            role,
            "WriteTheCaOnce",
            ["secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue"],
            self.cert_secret.ref,
        )
        allow(role, "WriteTheCaKey", ["secretsmanager:PutSecretValue"], self.key_secret.ref)
        allow(role, "FindTheS3PrefixList", ["ec2:DescribeManagedPrefixLists"], "*")
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "ec2:DescribeManagedPrefixLists has no resource-level permissions (IAM requires '*'); it "
            "only reads the ids of AWS-managed prefix lists.",
        )
        layer = lambda_.LayerVersion(
            self,
            "CryptographyLayer",
            code=deps_layer_code(self._config.architecture, requirements=SETUP_REQUIREMENTS),
            compatible_runtimes=[runtime()],
            compatible_architectures=[architecture(self._config)],
            description="cryptography for the egress setup custom resource (layers/egress_setup)",
        )
        others = other_packages(FUNCTIONS_DIR, {SETUP_PACKAGE})
        function = lambda_.Function(
            self,
            "Setup",
            function_name=name,
            runtime=runtime(),
            architecture=architecture(self._config),
            handler=f"{SETUP_PACKAGE}.handler.handler",
            code=lambda_.Code.from_asset(str(FUNCTIONS_DIR), exclude=[*others, *ASSET_EXCLUDES]),
            layers=[layer],
            role=role,
            log_group=log_group,
            timeout=cdk.Duration.seconds(60),
            memory_size=256,
            description=f"Thinkwork sandbox egress setup custom resource ({self._config.name})",
        )
        acknowledge(
            function,
            "AwsSolutions-L1",
            "Pinned to python3.13 on purpose, like every function of the stage: its cryptography "
            "layer is built for cp313 wheels (infra/cdk/layer_build.py).",
        )
        return function

    def _build_parameters(self) -> dict[str, ssm.StringParameter]:
        stage = self._config.name
        return {
            n.EGRESS_CA_CERT_ARN: ssm.StringParameter(
                self,
                "CaCertificateArnParameter",
                parameter_name=n.egress_network_parameter(stage, n.EGRESS_CA_CERT_ARN),
                string_value=self.cert_secret.ref,
                description="ARN of the egress proxy CA certificate secret (interpreters' certificates)",
            ),
            n.EGRESS_S3_PREFIX_LIST: ssm.StringParameter(
                self,
                "S3PrefixListParameter",
                parameter_name=n.egress_network_parameter(stage, n.EGRESS_S3_PREFIX_LIST),
                string_value=self.s3_prefix_list_id,
                description="The region's S3 managed prefix list (sessions' security group egress)",
            ),
        }
