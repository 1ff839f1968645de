"""Code Interpreters and the roles their sessions run under: the session-runner role dispatch and
the reaper assume, the interpreters' execution roles, the interpreters' names."""

from __future__ import annotations

import hashlib

from .environments import ENVIRONMENT_ABBREVIATIONS
from .ids import INTERPRETER_NAME_RE, PROJECT

# The session tag dispatch and the reaper set at AssumeRole of the session-runner role: the tenant
# the credentials serve (their session policy names that tenant's interpreters only). The role's
# trust requires it, so every runner session in CloudTrail says which tenant it was for.
RUNNER_SESSION_TAG_TENANT = "tenant_id"


def runner_role_name(stage: str) -> str:
    """The stage's one session-runner role: dispatch and the reaper assume it with a session
    policy naming only the serving tenant's interpreters (`sandbox_common.runner_policy`)."""
    return f"{PROJECT}-{stage}-sbx-runner"


def stage_of_runner_role(role_arn: str) -> str | None:
    """The stage whose session-runner role this is (`runner_role_name`), None for any other ARN."""
    name = role_arn.rpartition(":role/")[2]
    prefix, suffix = f"{PROJECT}-", "-sbx-runner"
    if not (name.startswith(prefix) and name.endswith(suffix)) or len(name) <= len(prefix + suffix):
        return None
    stage = name[len(prefix) : -len(suffix)]
    return stage if runner_role_name(stage) == name else None


def shared_execution_role_name(stage: str) -> str:
    """The interpreter execution role of every tenant without data grants: no permission at all
    (code in the sandbox gets no AWS access). A tenant with data grants has one of its own."""
    return f"{PROJECT}-{stage}-sbx-interpreter"


def tenant_execution_role_name(stage: str, tenant_id: str) -> str:
    """A tenant's own interpreter execution role (only a tenant with data grants has one).
    IAM role names are ≤ 64 chars: long tenant ids keep a prefix plus a hash suffix."""
    name = f"{PROJECT}-{stage}-sbx-data-{tenant_id}"
    if len(name) > 64:
        digest = hashlib.sha256(f"{stage}/{tenant_id}".encode()).hexdigest()[:10]
        name = f"{name[:53]}-{digest}"
    return name


def interpreter_name_prefix(stage: str) -> str:
    """What every Code Interpreter name of the stage starts with (the runner role's resources)."""
    return f"sbx_{stage}_".replace("-", "_")


def interpreter_name(stage: str, tenant_id: str, environment: str) -> str:
    """A Code Interpreter name AgentCore accepts: letters, digits, underscores, ≤ 48 chars.

    Hyphens are not allowed (a lesson from the peer system), so they become underscores; a name
    that would be too long keeps a readable prefix and a hash suffix so it stays unique.
    """
    base = f"{interpreter_name_prefix(stage)}{tenant_id}_{ENVIRONMENT_ABBREVIATIONS[environment]}".replace(
        "-", "_"
    )
    if len(base) > 48:
        digest = hashlib.sha256(f"{stage}/{tenant_id}/{environment}".encode()).hexdigest()[:10]
        base = f"{base[:37]}_{digest}"
    assert INTERPRETER_NAME_RE.match(base), base
    return base
