"""Where `sandboxctl` talks to: a deployed stage (default boto3 credential chain, resource names
from the Core stack's outputs) or the local stack (endpoints and names from its state file)."""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sandbox_common import naming as n

from infra.sandboxctl.errors import CtlError

# What to fix when AWS cannot even be asked (also what `sandboxctl mcp` answers its host's tool
# calls with: there, sandboxctl's environment is the `env` of the host's server configuration).
NO_REGION = (
    "no AWS region is configured: set AWS_DEFAULT_REGION (or AWS_PROFILE naming a profile with a region) in "
    "sandboxctl's environment (an MCP host's server `env`)"
)
NO_CREDENTIALS = (
    "no AWS credentials were found: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) in "
    "sandboxctl's environment (an MCP host's server `env`)"
)


@dataclass
class Target:
    stage: str
    local: bool
    tables: dict[str, str]  # TableSpec.logical -> physical
    dispatch_function: str
    quota_function: str
    audit_dlq_url: str
    _make_client: Callable[[str], Any]
    _clients: dict[str, Any] = field(default_factory=dict)
    audit_spool: str | None = None  # local stack: rows spooled while its emulated AWS was down
    artifacts_bucket: str = ""  # empty on a stage deployed before artifacts existed
    reaper_function: str = ""  # `warm set` asks it to refill the pool at once ("" = none)

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self._make_client(service)
        return self._clients[service]

    def table(self, spec: n.TableSpec) -> str:
        return self.tables[spec.logical]

    def caller_identity(self) -> str:
        """Who is recorded in `updated_by`: the caller's IAM ARN, or the OS user locally."""
        if self.local:
            return f"local:{os.environ.get('USER') or getpass.getuser()}"
        return str(self.client("sts").get_caller_identity()["Arn"])


def resolve(stage: str, local: bool) -> Target:
    return _local_target(stage) if local else _deployed_target(stage)


def _local_target(stage: str) -> Target:
    from infra.local.state import LocalStackError, read_state, state_dir

    try:
        state = read_state()
    except LocalStackError as exc:
        raise CtlError(str(exc)) from None
    if state is None or not state.running():
        raise CtlError(
            f"the local stack is not running (state dir {state_dir()}); start it with `sandboxctl local up`"
        )
    if state.data["stage"] != stage:
        raise CtlError(f"the local stack runs stage {state.data['stage']!r}, not {stage!r}")
    return local_target(state)


def local_target(state: Any) -> Target:
    """A target for a running local stack (`infra.local.state.LocalState`)."""
    resources = state.resources
    return Target(
        stage=resources.stage,
        local=True,
        tables=dict(resources.tables),
        dispatch_function=resources.functions[n.DISPATCH],
        quota_function=resources.functions[n.QUOTA_CHECK],
        audit_dlq_url=resources.audit_dlq_url,
        _make_client=state.client,
        audit_spool=str(state.directory / n.LOCAL_AUDIT_SPOOL_FILE),
        artifacts_bucket=resources.artifacts_bucket,
        reaper_function=resources.functions[n.REAPER],
    )


def _deployed_target(stage: str) -> Target:
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError
    from sandbox_common import aws

    session = aws.session()

    def make_client(service: str) -> Any:
        return session.client(service, config=Config(read_timeout=900, retries={"mode": "standard"}))

    stack = n.stack_name(stage, "Core")
    try:
        described = make_client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
    except ClientError as exc:
        raise CtlError(
            f"cannot read stack {stack}: {exc.response.get('Error', {}).get('Message', exc)}"
        ) from None
    except NoRegionError:
        raise CtlError(NO_REGION) from None
    except NoCredentialsError:
        raise CtlError(NO_CREDENTIALS) from None
    except BotoCoreError as exc:
        raise CtlError(f"cannot read stack {stack}: {exc}") from None
    outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}

    def output(key: str) -> str:
        if key not in outputs:
            raise CtlError(f"stack {stack} has no output {key!r}; is the stage fully deployed?")
        return str(outputs[key])

    return Target(
        stage=stage,
        local=False,
        tables={spec.logical: output(n.table_output_key(spec.logical)) for spec in n.ALL_TABLES},
        dispatch_function=output(n.OUTPUT_DISPATCH_FUNCTION),
        quota_function=output(n.OUTPUT_QUOTA_FUNCTION),
        audit_dlq_url=output(n.OUTPUT_AUDIT_DLQ_URL),
        _make_client=make_client,
        artifacts_bucket=outputs.get(n.OUTPUT_ARTIFACTS_BUCKET, ""),
        reaper_function=n.function_name(stage, n.REAPER),
    )
