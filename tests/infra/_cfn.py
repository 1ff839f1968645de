"""Small readers over synthesized CloudFormation templates, shared by the infra tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

Template = dict[str, Any]


def resources(template: Template, type_: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template.get("Resources", {}).items() if v["Type"] == type_}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def render(value: Any) -> str:
    """A token-bearing value as text: Ref X -> <X>, GetAtt -> <Id.Attr>, Join/Sub flattened."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if "Ref" in value:
            return f"<{value['Ref']}>"
        if "Fn::GetAtt" in value:
            return f"<{'.'.join(value['Fn::GetAtt'])}>"
        if "Fn::Join" in value:
            sep, parts = value["Fn::Join"]
            return sep.join(render(p) for p in parts)
        if "Fn::Sub" in value:
            return value["Fn::Sub"] if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"][0]
    return repr(value)


def policy_statements(template: Template) -> Iterator[tuple[str, dict[str, Any]]]:
    """(owning resource id, statement) for every identity policy: inline role policies,
    AWS::IAM::Policy and AWS::IAM::ManagedPolicy. The owner of an IAM::Policy is its role(s)."""
    for rid, res in template.get("Resources", {}).items():
        props = res.get("Properties", {})
        if res["Type"] == "AWS::IAM::Role":
            for policy in props.get("Policies", []):
                for st in as_list(policy["PolicyDocument"]["Statement"]):
                    yield rid, st
        elif res["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            owners = [r["Ref"] for r in props.get("Roles", []) if isinstance(r, dict) and "Ref" in r] or [rid]
            for st in as_list(props["PolicyDocument"]["Statement"]):
                for owner in owners:
                    yield owner, st


def allowed_actions(statement: dict[str, Any]) -> list[str]:
    return as_list(statement.get("Action", [])) if statement.get("Effect") == "Allow" else []


def statement_resources(statement: dict[str, Any]) -> list[str]:
    return [render(r) for r in as_list(statement.get("Resource", []))]
