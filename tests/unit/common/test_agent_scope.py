"""The agent's tenant scope comes from the ARN Lambda reports it was invoked through."""

from __future__ import annotations

import pytest
from sandbox_common.agent_scope import EVERY_TENANT, alias_for, scope_of

FN = "arn:aws:lambda:eu-west-1:123456789012:function:thinkwork-dev-dispatch"


@pytest.mark.parametrize(
    ("arn", "allowed", "refused"),
    [
        (FN, ["acme", "globex"], []),  # unqualified: every tenant
        (f"{FN}:$LATEST", ["acme", "globex"], []),
        (f"{FN}:7", ["acme"], []),  # a version
        (f"{FN}:live", ["acme"], []),  # an alias that is not a scope
        (f"{FN}:scope_acme", ["acme"], ["globex", "acme-2", "", None]),
        (f"{FN}:scope_a-b", ["a-b"], ["a", "b"]),
        (f"{FN}:scope_", [], ["acme", ""]),  # a scope alias naming no valid tenant: nobody
        (f"{FN}:scope_ACME", [], ["acme", "ACME"]),
        ("arn:aws:lambda:eu-west-1:123456789012:function", [], ["acme"]),  # not a function ARN
        ("not-an-arn", [], ["acme"]),
        ("arn:aws-cn:lambda:cn-north-1:123456789012:function:f:scope_acme", ["acme"], ["globex"]),
    ],
)
def test_scope_of_invoked_arn(arn: str, allowed: list[str], refused: list) -> None:
    scope = scope_of(arn)
    assert all(scope.allows(t) for t in allowed)
    assert not any(scope.allows(t) for t in refused)


def test_scope_of_no_arn_is_every_tenant_and_alias_for_round_trips() -> None:
    # Outside Lambda (a local in-process call) there is no invoked ARN: the caller is the process
    assert scope_of(None) == EVERY_TENANT
    assert scope_of(f"{FN}:{alias_for('acme')}").tenants == frozenset({"acme"})
    with pytest.raises(ValueError):
        alias_for("Not_A_Tenant")
