"""cdk-nag acknowledgments, always at the narrowest construct and always with a reason."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import IConstruct


def acknowledge(scope: IConstruct, rule_id: str, reason: str) -> None:
    """`rule_id` is a rule (`AwsSolutions-L1`) or one finding of it (`AwsSolutions-IAM5[Resource::…]`)."""
    if len(reason) < 40:
        raise ValueError(f"acknowledging {rule_id} needs a real reason, got {reason!r}")
    # cdk-nag 3 names acknowledgments "<pack>::<rule>" (it prints that form in its findings).
    qualified = rule_id if "::" in rule_id.split("[", 1)[0] else f"{rule_id.split('-', 1)[0]}::{rule_id}"
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=qualified, reason=reason))


def finding_arn(scope: IConstruct, arn: str) -> str:
    """How cdk-nag spells a token ARN in a finding id: `Ref X` -> `<X>`, GetAtt -> `<Id.Attr>`."""
    return _render(cdk.Stack.of(scope).resolve(arn))


def _render(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return str(sep).join(_render(p) for p in parts)
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return f"<{'.'.join(value['Fn::GetAtt'])}>"
    raise ValueError(f"cannot render {value!r} for a cdk-nag finding id")
