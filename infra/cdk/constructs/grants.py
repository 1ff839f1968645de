"""One statement of a role's policy, written the same way by every construct: its sid, its actions
and the resources they act on (and, seldom, a condition); and the ARNs those resources have."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct


def allow(
    role: iam.IRole,
    sid: str,
    actions: Iterable[str],
    *resources: str,
    conditions: dict[str, Any] | None = None,
) -> None:
    """`role` may do `actions` on `resources` (statement `sid`)."""
    role.add_to_principal_policy(
        iam.PolicyStatement(sid=sid, actions=list(actions), resources=list(resources), conditions=conditions)
    )


def ssm_parameter_arn(scope: Construct, path: str) -> str:
    """The ARN of the SSM parameter (or, with a trailing `*`, the parameters) at `path`."""
    return cdk.Stack.of(scope).format_arn(
        service="ssm",
        resource="parameter",
        resource_name=path.lstrip("/"),
        arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME,
    )


def index_arns(table_arn: str, index_names: Iterable[str]) -> list[str]:
    """The ARNs of a table's indexes (a Query on an index is authorised on the index's ARN)."""
    return [f"{table_arn}/index/{name}" for name in index_names]
