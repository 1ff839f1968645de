"""Stage-wide SSM parameters: the two global caps and the per-call price.

Operators change these values in SSM without a redeploy; a redeploy of an unchanged config
writes the same values back, so caps are a config default, not a drift trap.
"""

from __future__ import annotations

from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra.cdk.config import StageConfig
from infra.cdk.constructs.definitions import global_parameters


class ParametersConstruct(Construct):
    """Attributes: `parameters` (SSM path -> StringParameter)."""

    def __init__(self, scope: Construct, id_: str, *, config: StageConfig) -> None:
        super().__init__(scope, id_)
        self.parameters: dict[str, ssm.StringParameter] = {
            path: self._build_parameter(path, value) for path, value in global_parameters(config).items()
        }

    def _build_parameter(self, path: str, value: str) -> ssm.StringParameter:
        return ssm.StringParameter(
            self,
            path.rsplit("/", 1)[-1].replace("_", "-"),
            parameter_name=path,
            string_value=value,
            description=(
                "Thinkwork sandbox setting; operators change it with `sandboxctl caps set` (no redeploy)."
            ),
        )
