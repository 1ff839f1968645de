"""The test IAM evaluator (tests/support/iam_eval.py) answers as the IAM User Guide's policy
evaluation logic does, for the elements our policies use; what it does not model it refuses."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.iam_eval import Request, Unsupported, decide, effective

ARN_A = "arn:aws:bedrock-agentcore:us-east-1:123456789012:code-interpreter-custom/sbx_dev_acme_pub-AbCdEfGhIj"
ARN_B = (
    "arn:aws:bedrock-agentcore:us-east-1:123456789012:code-interpreter-custom/sbx_dev_globex_pub-AbCdEfGhIj"
)


def _policy(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def _allow(action: Any, resource: Any, **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


@pytest.mark.parametrize(
    ("policies", "request_", "verdict"),
    [
        # no statement applies: implicit deny
        (
            [_policy(_allow("s3:GetObject", "*"))],
            Request("s3:PutObject", "arn:aws:s3:::b/k"),
            "implicit_deny",
        ),
        # an allow applies
        (
            [_policy(_allow("s3:GetObject", "arn:aws:s3:::b/*"))],
            Request("s3:GetObject", "arn:aws:s3:::b/k"),
            "allow",
        ),
        # explicit deny wins over an allow, also in another policy
        (
            [
                _policy(_allow("s3:*", "*")),
                _policy({"Effect": "Deny", "Action": "s3:GetObject", "Resource": "*"}),
            ],
            Request("s3:GetObject", "arn:aws:s3:::b/k"),
            "explicit_deny",
        ),
        # actions match case-insensitively; resources case-sensitively
        ([_policy(_allow("S3:getobject", "*"))], Request("s3:GetObject", "x"), "allow"),
        (
            [_policy(_allow("s3:GetObject", "arn:aws:s3:::B/*"))],
            Request("s3:GetObject", "arn:aws:s3:::b/k"),
            "implicit_deny",
        ),
        # `.` in a pattern is a literal dot (moto's evaluator matches any character there)
        (
            [_policy(_allow("s3:GetObject", "arn:aws:s3:::a.b/*"))],
            Request("s3:GetObject", "arn:aws:s3:::aXb/k"),
            "implicit_deny",
        ),
        # `?` is one character, `*` crosses `/` and `:`
        (
            [_policy(_allow("s3:GetObject", "arn:aws:s3:::b/?"))],
            Request("s3:GetObject", "arn:aws:s3:::b/kk"),
            "implicit_deny",
        ),
        (
            [_policy(_allow("s3:GetObject", "arn:aws:s3:::*"))],
            Request("s3:GetObject", "arn:aws:s3:::b/k/l:m"),
            "allow",
        ),
        # NotAction / NotResource
        (
            [_policy({"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"})],
            Request("iam:CreateRole", "*"),
            "implicit_deny",
        ),
        (
            [_policy({"Effect": "Allow", "Action": "s3:*", "NotResource": "arn:aws:s3:::secret/*"})],
            Request("s3:GetObject", "arn:aws:s3:::secret/k"),
            "implicit_deny",
        ),
        # a condition on a missing key does not match (an Allow stays neutral, not a deny)
        (
            [
                _policy(
                    _allow("s3:GetObject", "*", Condition={"StringEquals": {"aws:PrincipalTag/team": "a"}})
                )
            ],
            Request("s3:GetObject", "x"),
            "implicit_deny",
        ),
        (
            [
                _policy(
                    _allow("s3:GetObject", "*", Condition={"StringEquals": {"aws:PrincipalTag/team": "a"}})
                ),
                _policy(_allow("s3:GetObject", "*")),
            ],
            Request("s3:GetObject", "x"),
            "allow",
        ),
        # ForAllValues on a missing key holds (vacuous); Null tests presence
        (
            [
                _policy(
                    _allow(
                        "s3:GetObject", "*", Condition={"ForAllValues:StringEquals": {"aws:TagKeys": ["a"]}}
                    )
                )
            ],
            Request("s3:GetObject", "x"),
            "allow",
        ),
        (
            [_policy(_allow("s3:GetObject", "*", Condition={"Null": {"aws:RequestTag/a": "false"}}))],
            Request("s3:GetObject", "x"),
            "implicit_deny",
        ),
        (
            [_policy(_allow("s3:GetObject", "*", Condition={"Null": {"aws:RequestTag/a": "false"}}))],
            Request("s3:GetObject", "x", context={"aws:RequestTag/a": "1"}),
            "allow",
        ),
        # a trust policy: the principal must be named
        (
            [
                _policy(
                    {
                        "Effect": "Allow",
                        "Principal": {"AWS": "arn:aws:iam::1:role/a"},
                        "Action": "sts:AssumeRole",
                    }
                )
            ],
            Request("sts:AssumeRole", "*", principal="arn:aws:iam::1:role/b"),
            "implicit_deny",
        ),
    ],
)
def test_decide_follows_iam_policy_evaluation(policies, request_, verdict) -> None:
    assert decide(policies, request_) == verdict


def test_effective_is_the_intersection_of_role_and_session_policies() -> None:
    # Given a role allowed on both interpreters and a session policy naming one
    role = _policy(
        _allow(
            ["bedrock-agentcore:*"],
            "arn:aws:bedrock-agentcore:us-east-1:123456789012:code-interpreter-custom/sbx_dev_*",
        )
    )
    session = _policy(_allow(["bedrock-agentcore:InvokeCodeInterpreter", "s3:GetObject"], [ARN_A, "*"]))
    # Then only what both allow is allowed: the session policy grants nothing the role lacks
    assert effective([role], session, Request("bedrock-agentcore:InvokeCodeInterpreter", ARN_A)) == "allow"
    assert (
        effective([role], session, Request("bedrock-agentcore:StopCodeInterpreterSession", ARN_A))
        == "implicit_deny"
    )
    assert effective([role], session, Request("s3:GetObject", "arn:aws:s3:::b/k")) == "implicit_deny"
    # And an explicit deny in the session policy denies
    denying = _policy(_allow("*", "*"), {"Effect": "Deny", "Action": "*", "Resource": ARN_B})
    assert (
        effective([role], denying, Request("bedrock-agentcore:InvokeCodeInterpreter", ARN_B))
        == "explicit_deny"
    )


@pytest.mark.parametrize(
    "statement",
    [
        _allow("s3:GetObject", "arn:aws:s3:::${aws:username}/*"),
        _allow("s3:GetObject", "*", Condition={"NumericLessThan": {"s3:max-keys": "10"}}),
        {"Effect": "Maybe", "Action": "*", "Resource": "*"},
    ],
)
def test_decide_refuses_what_it_does_not_model(statement) -> None:
    with pytest.raises(Unsupported):
        decide(
            [_policy(statement)], Request("s3:GetObject", "arn:aws:s3:::u/k", context={"s3:max-keys": "5"})
        )
