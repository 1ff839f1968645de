"""What a running local stack is: its state file (which process runs where, and the resources it
created in moto) and whether its processes still live.

`sandboxctl --local` reads this on every command, so it is stdlib only: reading the state of a
stack loads none of the code that starts one (`infra.local.stack`), nor the interpreter, the CDK
configuration or pydantic.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from sandbox_common import aws
from sandbox_common.aws import SINGLE_ATTEMPT

REPO_ROOT = Path(__file__).resolve().parents[2]
STATE_FILE = "state.json"
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
LOCAL_ACCOUNT = "123456789012"  # moto's default account
LOCAL_REGION = "us-east-1"


class LocalStackError(Exception):
    """The local stack could not be started/inspected; the message says why (one line)."""


def state_dir() -> Path:
    return Path(os.environ.get("SANDBOX_LOCAL_DIR") or REPO_ROOT / ".local").resolve()


@dataclass(frozen=True)
class LocalResources:
    """What the local stack created: the same facts a deployed stage exposes as stack outputs."""

    stage: str
    region: str
    account: str
    tables: dict[str, str]  # TableSpec.logical -> physical
    functions: dict[str, str]  # logical -> physical function name
    audit_dlq_url: str
    security_topic_arn: str
    # tenant_id, environment, id, arn, network_mode of each interpreter
    interpreters: list[dict[str, str]] = field(default_factory=list)
    runner_role: str = ""  # the stage's one session-runner role (ARN)
    log_groups: list[str] = field(default_factory=list)
    artifacts_bucket: str = ""
    data_bucket: str = ""  # the demo tenant data bucket (tenant data's stand-in)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LocalResources:
        # Only the fields this version knows: a state file written by an older checkout (a stack
        # still running across an update) is read, not refused; `local down` then stops it.
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class LocalState:
    directory: Path
    data: dict[str, Any]

    @property
    def resources(self) -> LocalResources:
        return LocalResources.from_dict(self.data["resources"])

    def endpoint(self, component: str) -> str:
        return str(self.data["processes"][component]["endpoint"])

    def alive(self) -> dict[str, bool]:
        """Each process the stack started: alive, and still the process it started."""
        return {
            name: process_alive(int(process["pid"]), process["marker"])
            for name, process in self.data["processes"].items()
        }

    def running(self) -> bool:
        return all_running(self.alive())

    def client_environment(self) -> dict[str, str]:
        """The variables that point an unmodified boto3 at this stack (what the Lambdas get)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint("moto"),
            "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE": self.endpoint("interpreter"),
            # the control plane too: the interpreter says which of its calls it does not offer
            # (moto, the fallback of AWS_ENDPOINT_URL, would answer an HTML 500)
            "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE_CONTROL": self.endpoint("interpreter"),
            "AWS_ENDPOINT_URL_LAMBDA": self.endpoint("lambda"),
            "AWS_REGION": self.data["region"],
            "AWS_DEFAULT_REGION": self.data["region"],
            **FAKE_CREDENTIALS,
        }

    def client(self, service: str) -> Any:
        from botocore.config import Config

        component = {"lambda": "lambda", "bedrock-agentcore": "interpreter"}.get(service, "moto")
        return aws.new_client(
            service,
            endpoint_url=self.endpoint(component),
            region_name=self.data["region"],
            aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            config=Config(read_timeout=900, retries=dict(SINGLE_ATTEMPT)),
        )


def read_state(directory: Path | None = None) -> LocalState | None:
    directory = directory or state_dir()
    try:
        return LocalState(directory, json.loads((directory / STATE_FILE).read_text()))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise LocalStackError(f"state file {directory / STATE_FILE} is not valid JSON: {exc}") from None


def all_running(alive: dict[str, bool]) -> bool:
    """A stack runs when it started processes and every one of them is alive."""
    return bool(alive) and all(alive.values())


def process_alive(pid: int, marker: str) -> bool:
    """True iff `pid` runs and is still the process we started (its command line holds `marker`),
    so a recycled pid is never mistaken for ours — and never signalled."""
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmd:
            return marker.encode() in cmd.read()
    except (FileNotFoundError, ProcessLookupError):
        return False


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
