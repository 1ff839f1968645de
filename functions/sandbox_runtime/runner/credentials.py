"""Tenant-scoped AgentCore clients.

The dispatch role holds no interpreter permission at all. The stage has one session-runner role,
whose own policy allows the runner's actions on the stage's interpreters; the runner assumes it
with a session policy naming only the serving tenant's interpreter ARNs
(`sandbox_common.runner_policy`), so the credentials it gets reach that tenant's interpreters and
no other (a session's permissions are the role's policy intersected with its session policy).
AssumeRole also carries the session tag `tenant_id` (naming RUNNER_SESSION_TAG_TENANT), which the
role's trust requires, so each runner session says in CloudTrail which tenant it served. Without
the tenant's interpreter ARNs there is no session policy, and the runner never assumes the role
(it would get every tenant's interpreters).

Residual: the dispatch and reaper roles may assume the runner role with any session policy (IAM
has no condition key that requires one), so a bug that routes a call to the wrong tenant record
altogether gets that tenant's ARNs and reaches its interpreters; so would code running as the
dispatch role. The runner's own check of every interpreter id against the tenant's list stands in
front of that (SessionRunner._check_owned).

Credentials are cached per (role ARN, tenant, interpreter ARNs) until shortly before they expire,
so a warm container does one AssumeRole per tenant per ~10 minutes, not one per call. The two
clients built from them differ on purpose:

- control (Start/Stop/Get): standard retries. Start carries an idempotency token that botocore
  fills in once and reuses on retry, so a retried Start cannot leave a second session.
- invoke (InvokeCodeInterpreter): exactly one attempt. A retried invoke could run user code
  twice. Note botocore's `retries={"max_attempts": 1}` means ONE RETRY (two attempts); only
  `total_max_attempts: 1` means a single attempt.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sandbox_common import aws
from sandbox_common import naming as n
from sandbox_common.aws import SINGLE_ATTEMPT
from sandbox_common.errors import SandboxError
from sandbox_common.runner_policy import SessionPolicyError, session_policy_json

from .errors import failure

SERVICE = "bedrock-agentcore"
ASSUME_ROLE_SECONDS = 900  # the STS minimum: short-lived by design
REFRESH_BEFORE_EXPIRY = timedelta(minutes=5)
CONNECT_TIMEOUT_SECONDS = 3
CONTROL_READ_TIMEOUT_SECONDS = 30
# The invoke read timeout backs up the runner's own deadline: the runner gives up at the
# deadline; the socket gives up a little later so an abandoned reader thread always ends.
INVOKE_READ_TIMEOUT_MARGIN_SECONDS = 5

CONTROL_RETRIES = {"mode": "standard", "total_max_attempts": 3}
INVOKE_RETRIES = SINGLE_ATTEMPT

_NO_CREDENTIALS = "The sandbox could not obtain credentials for this tenant; please try again later."
_ROLE_SESSION_NAME_BAD = re.compile(r"[^\w+=,.@-]+")


def role_session_name(tenant_id: str) -> str:
    """RoleSessionName allows [\\w+=,.@-]{2,64}; request ids may also contain ':'."""
    return _ROLE_SESSION_NAME_BAD.sub("-", f"sbx-runner-{tenant_id}")[:64]


def _now() -> datetime:
    """Wall clock for credential expiry (tests move it forward)."""
    return datetime.now(UTC)


# One boto3 session for every tenant's clients (with the process's shared data loader, so a
# credential refresh builds clients without re-reading botocore's JSON). Credentials are passed
# per client, never stored on the session.
tenant_session = aws.SharedSession()


def new_client(service: str, config: Any, creds: dict[str, Any]) -> Any:
    """The one place runner clients are built: endpoint and region come from boto3's own
    configuration (AWS_ENDPOINT_URL_BEDROCK_AGENTCORE for the local interpreter)."""
    return tenant_session.client(
        service,
        config=config,
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
    )


@dataclass
class _Entry:
    expires_at: datetime
    creds: dict[str, Any]
    clients: dict[tuple[str, int], Any] = field(default_factory=dict)


_cache: dict[tuple[str, str, tuple[str, ...]], _Entry] = {}
_lock = threading.Lock()


def clear_cache() -> None:
    with _lock:
        _cache.clear()
    tenant_session.reset()


class TenantCredentials:
    """AgentCore clients acting as one tenant's session-runner role."""

    def __init__(
        self, *, tenant_id: str, role_arn: str, interpreter_arns: tuple[str, ...], call_timeout_seconds: int
    ) -> None:
        self.tenant_id = tenant_id
        self.role_arn = role_arn
        self.interpreter_arns = tuple(sorted(set(interpreter_arns)))
        self.call_timeout_seconds = call_timeout_seconds

    def control_client(self) -> Any:
        return self._client("control", CONTROL_READ_TIMEOUT_SECONDS)

    def invoke_client(self) -> Any:
        return self._client("invoke", self.call_timeout_seconds + INVOKE_READ_TIMEOUT_MARGIN_SECONDS)

    def _client(self, kind: str, read_timeout: int) -> Any:
        from botocore.config import Config

        entry = self._entry()
        key = (kind, read_timeout)
        with _lock:
            cached = entry.clients.get(key)
            if cached is not None:
                return cached
        retries = INVOKE_RETRIES if kind == "invoke" else CONTROL_RETRIES
        config = Config(
            retries=dict(retries), connect_timeout=CONNECT_TIMEOUT_SECONDS, read_timeout=read_timeout
        )
        built = new_client(SERVICE, config, entry.creds)
        with _lock:
            return entry.clients.setdefault(key, built)

    def _entry(self) -> _Entry:
        # Keyed by the tenant and its interpreter ARNs: credentials confined to tenant A's
        # interpreters are never handed to a runner of tenant B, although the role is the same.
        key = (self.role_arn, self.tenant_id, self.interpreter_arns)
        with _lock:
            entry = _cache.get(key)
            if entry is not None and _now() < entry.expires_at - REFRESH_BEFORE_EXPIRY:
                return entry
        fresh = self._assume()
        with _lock:
            _cache[key] = fresh
        return fresh

    def session_policy(self) -> str:
        """The session policy this tenant's credentials are issued with: the runner's actions on
        its own interpreter ARNs only (raises SessionPolicyError without any), and reading the
        stage's egress CA certificate, which AgentCore fetches with these credentials for a
        VPC-mode interpreter's `certificates`."""
        return session_policy_json(self.interpreter_arns, stage=n.stage_of_runner_role(self.role_arn))

    def _assume(self) -> _Entry:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            policy = self.session_policy()
        except SessionPolicyError as exc:
            raise failure(SandboxError, _NO_CREDENTIALS, failure_reason=f"no_session_policy:{exc}") from None
        try:
            answer = aws.client("sts").assume_role(
                RoleArn=self.role_arn,
                RoleSessionName=role_session_name(self.tenant_id),
                DurationSeconds=ASSUME_ROLE_SECONDS,
                Policy=policy,
                Tags=[{"Key": n.RUNNER_SESSION_TAG_TENANT, "Value": self.tenant_id}],
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "Unknown")
            raise failure(
                SandboxError, _NO_CREDENTIALS, failure_reason=f"assume_role_failed:{code}"
            ) from None
        except BotoCoreError as exc:
            reason = f"assume_role_failed:{type(exc).__name__}"
            raise failure(SandboxError, _NO_CREDENTIALS, failure_reason=reason) from None
        creds = answer["Credentials"]
        expires_at = creds["Expiration"]
        if expires_at.tzinfo is None:
            expires_at = expires_at.replace(tzinfo=UTC)
        return _Entry(expires_at=expires_at, creds=dict(creds))
