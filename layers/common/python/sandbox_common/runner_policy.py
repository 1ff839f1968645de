"""What the session runner may do in AgentCore, and the session policy that confines it to one
tenant. One definition for the CDK stacks (the runner role's own policy), the shared run time
(the session policy sent with every AssumeRole), the local stack and the tests.

The stage has ONE session-runner role. Its own policy allows RUNNER_ACTIONS on every interpreter
of the stage; dispatch and the reaper never use it as such: each AssumeRole carries a session
policy naming only the serving tenant's interpreter ARNs, and a session's permissions are the
intersection of the role's policy and the session policy (IAM: "the resulting session's
permissions are the intersection of the role's identity-based policy and the session
policies"). So credentials issued for tenant A cannot start, invoke, stop or list a session of
tenant B's interpreters. Stdlib only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from . import naming as n

# What a tenant's runner credentials may do, on that tenant's interpreter ARNs only. List is there
# so a Start whose answer was lost can be found by name and stopped (no orphan).
RUNNER_ACTIONS: tuple[str, ...] = (
    "bedrock-agentcore:StartCodeInterpreterSession",
    "bedrock-agentcore:InvokeCodeInterpreter",
    "bedrock-agentcore:StopCodeInterpreterSession",
    "bedrock-agentcore:ListCodeInterpreterSessions",
)
# What a runner session may do with the stage's egress CA certificate (ca_certificate_statement).
CA_CERTIFICATE_ACTIONS: tuple[str, ...] = ("secretsmanager:GetSecretValue",)
# STS caps an inline session policy at 2,048 characters of plain text (before packing); a tenant
# has at most one interpreter per environment, so its policy stays far below.
SESSION_POLICY_MAX_CHARS = 2048


class SessionPolicyError(ValueError):
    """No session policy can be built (no interpreter, or too many): never assume without one."""


def session_policy(interpreter_arns: Iterable[str], *, stage: str | None = None) -> dict[str, Any]:
    """The session policy for one tenant: RUNNER_ACTIONS on exactly these interpreter ARNs, and,
    given the stage, reading the stage's egress CA certificate (`ca_certificate_statement`)."""
    arns = sorted(set(interpreter_arns))
    if not arns or any(not isinstance(a, str) or not a.startswith("arn:") or "*" in a for a in arns):
        raise SessionPolicyError("a session policy needs the tenant's interpreter ARNs (no wildcard)")
    statements: list[dict[str, Any]] = [
        {
            "Sid": "OwnInterpretersOnly",
            "Effect": "Allow",
            "Action": list(RUNNER_ACTIONS),
            "Resource": arns,
        }
    ]
    if stage is not None:
        statements.append(ca_certificate_statement(stage, arns[0]))
    return {"Version": "2012-10-17", "Statement": statements}


def ca_certificate_statement(stage: str, interpreter_arn: str) -> dict[str, Any]:
    """AgentCore reads a VPC-mode interpreter's `certificates` (the egress proxy's CA certificate,
    a Secrets Manager secret) with its caller's credentials, and a session's permissions are the
    role's policy intersected with its session policy: the session may read that one secret, by
    its name and Secrets Manager's six-character suffix, in the interpreter's account and region.
    A certificate is public material; the CA's key is another secret no runner may read."""
    partition, region, account = _arn_parts(interpreter_arn)
    secret = f"{n.egress_ca_cert_secret_name(stage)}-??????"
    return {
        "Sid": "EgressCaCertificate",
        "Effect": "Allow",
        "Action": list(CA_CERTIFICATE_ACTIONS),
        "Resource": [f"arn:{partition}:secretsmanager:{region}:{account}:secret:{secret}"],
    }


def _arn_parts(arn: str) -> tuple[str, str, str]:
    parts = arn.split(":")
    if len(parts) < 6 or not parts[1] or not parts[3] or not parts[4].isdigit():
        raise SessionPolicyError(f"not an interpreter ARN: {arn!r}")
    return parts[1], parts[3], parts[4]


def session_policy_json(interpreter_arns: Iterable[str], *, stage: str | None = None) -> str:
    """`session_policy` as the compact JSON AssumeRole's `Policy` takes, within STS's size limit."""
    text = json.dumps(session_policy(interpreter_arns, stage=stage), separators=(",", ":"))
    if len(text) > SESSION_POLICY_MAX_CHARS:
        raise SessionPolicyError(
            f"session policy of {len(text)} characters exceeds {SESSION_POLICY_MAX_CHARS}"
        )
    return text
