"""A small IAM policy evaluator for the policies this project writes, so tests can ask IAM's
question ("would this request be allowed?") without AWS.

moto offers no evaluator for this: its `moto.iam.access_control.IAMPolicy` turns a failed
condition of an Allow into a Deny, matches wildcards as regular expressions without escaping
(`.` matches anything) and evaluates an assumed role's own policies only (never its session
policy). This one follows the IAM User Guide's policy evaluation logic for what our policies use:

- a request is allowed iff some statement allows it and none denies it (explicit deny wins,
  no match is an implicit deny);
- `Action`/`NotAction` (case-insensitive, `*` and `?` wildcards), `Resource`/`NotResource`
  (case-sensitive, wildcards), `Principal` (`"*"`, `{"AWS": ...}`, `{"Service": ...}`);
- conditions: every operator of a statement and every key under it must hold (AND), any of a
  key's values may match (OR); `StringEquals`, `StringNotEquals`, `StringLike`, `ArnLike`,
  `ArnEquals`, `Null`, `Bool`, and the `ForAllValues:` / `ForAnyValue:` set forms of the string
  operators. A missing key makes a plain operator false, `ForAllValues` true (vacuously) and
  `ForAnyValue` false. Anything else (policy variables, other operators) raises: never a guess;
- an assumed-role session's permissions are the role's identity policies intersected with the
  session policy (`effective`), an explicit deny in either denying.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

Verdict = Literal["allow", "explicit_deny", "implicit_deny"]


@dataclass(frozen=True)
class Request:
    action: str
    resource: str
    principal: str | None = None  # for resource and trust policies
    context: dict[str, Any] = field(default_factory=dict)  # condition keys: str or list of str


class Unsupported(ValueError):
    """A policy element this evaluator does not model: the test must not pass on a guess."""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _wildcard(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    if "${" in pattern:
        raise Unsupported(f"policy variables are not modelled: {pattern!r}")
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL) is not None


def _matches_action(statement: dict[str, Any], action: str) -> bool:
    if "NotAction" in statement:
        return not any(_wildcard(p, action, ignore_case=True) for p in _list(statement["NotAction"]))
    return any(_wildcard(p, action, ignore_case=True) for p in _list(statement.get("Action", [])))


def _matches_resource(statement: dict[str, Any], resource: str) -> bool:
    if "NotResource" in statement:
        return not any(_wildcard(p, resource) for p in _list(statement["NotResource"]))
    if "Resource" not in statement:  # a trust policy: the resource is the role itself
        return True
    return any(_wildcard(p, resource) for p in _list(statement["Resource"]))


def _matches_principal(statement: dict[str, Any], principal: str | None) -> bool:
    if "Principal" not in statement:
        return True  # an identity policy: the principal is whoever holds it
    if principal is None:
        return False
    named = statement["Principal"]
    if named == "*":
        return True
    if not isinstance(named, dict):
        raise Unsupported(f"principal {named!r}")
    for kind in named:
        if kind not in ("AWS", "Service"):
            raise Unsupported(f"principal kind {kind!r}")
    return any(p == "*" or p == principal for values in named.values() for p in _list(values))


_STRING_OPS = {
    "StringEquals": lambda want, got: want == got,
    "StringLike": lambda want, got: _wildcard(want, got),
    "ArnEquals": lambda want, got: want == got,
    "ArnLike": lambda want, got: _wildcard(want, got),
}


def _condition_holds(operator: str, key: str, wanted: Any, context: dict[str, Any]) -> bool:
    present = key in context
    values = [str(v) for v in _list(context[key])] if present else []
    wanted_values = [str(w) for w in _list(wanted)]
    if operator == "Null":
        (flag,) = wanted_values
        return (not present) if flag == "true" else present
    if operator == "Bool":
        return present and any(v.lower() == w.lower() for v in values for w in wanted_values)
    if operator == "StringNotEquals":
        return not present or all(v not in wanted_values for v in values)
    qualifier, _, base = operator.rpartition(":")
    if base not in _STRING_OPS or qualifier not in ("", "ForAllValues", "ForAnyValue"):
        raise Unsupported(f"condition operator {operator!r}")
    test = _STRING_OPS[base]
    if qualifier == "ForAllValues":  # every request value matches one of the policy's
        return all(any(test(w, v) for w in wanted_values) for v in values)
    if qualifier == "ForAnyValue":
        return any(test(w, v) for v in values for w in wanted_values)
    if not present or len(values) != 1:
        return False  # a plain operator on a missing (or multivalued) key does not match
    return any(test(w, values[0]) for w in wanted_values)


def _conditions_hold(statement: dict[str, Any], context: dict[str, Any]) -> bool:
    return all(
        _condition_holds(operator, key, wanted, context)
        for operator, keys in statement.get("Condition", {}).items()
        for key, wanted in keys.items()
    )


def statement_applies(statement: dict[str, Any], request: Request) -> bool:
    return (
        _matches_action(statement, request.action)
        and _matches_resource(statement, request.resource)
        and _matches_principal(statement, request.principal)
        and _conditions_hold(statement, request.context)
    )


def decide(policies: list[dict[str, Any]], request: Request) -> Verdict:
    """IAM's verdict for policies evaluated together (one principal's identity policies, or one
    resource/trust policy)."""
    allowed = False
    for policy in policies:
        for statement in _list(policy["Statement"]):
            effect = statement.get("Effect")
            if effect not in ("Allow", "Deny"):
                raise Unsupported(f"effect {effect!r}")
            if statement_applies(statement, request):
                if effect == "Deny":
                    return "explicit_deny"
                allowed = True
    return "allow" if allowed else "implicit_deny"


def effective(identity: list[dict[str, Any]], session: dict[str, Any], request: Request) -> Verdict:
    """An assumed-role session's verdict: allowed only if the role's policies AND the session
    policy allow it; an explicit deny in either denies."""
    verdicts = (decide(identity, request), decide([session], request))
    if "explicit_deny" in verdicts:
        return "explicit_deny"
    return "allow" if verdicts == ("allow", "allow") else "implicit_deny"
