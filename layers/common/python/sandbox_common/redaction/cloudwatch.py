"""CloudWatch artefacts generated from the catalogue (redaction's log-side layers:
masking at ingestion and the backstop).

- `data_protection_policy()`: the log-group data protection policy (masking at ingestion) with
  one custom data identifier per catalogue class plus AWS's managed `AwsSecretKey`.
- `subscription_filter_pattern()`: the prefilter of the subscription filter feeding `backstop`.

Documented limits these are checked against (CloudWatch Logs user guide, "Custom data
identifiers" and "Filter pattern syntax"):
- custom data identifiers: at most 10 per policy; name ≤ 128 chars of [A-Za-z0-9_-]; regex ≤ 200
  chars of alphanumerics, `_ # = @ / ; , -` and space, and the operators `^ $ ? [ ] { } | \\ * + .`
  (no parentheses, quotes or colons);
- filter-pattern regex: inside `%…%`, alphanumerics, `: _ # = @ / ; , -` and the same operators,
  no parentheses (no subpatterns), no multi-byte characters; the Audit and Deidentify statements
  must list exactly the same identifiers.
"""

from __future__ import annotations

import re
from typing import Any

from .catalogue import TOKEN_CLASSES

POLICY_VERSION = "2021-06-01"
MAX_CUSTOM_IDENTIFIERS = 10
MAX_IDENTIFIER_NAME = 128
MAX_IDENTIFIER_REGEX = 200
MANAGED_IDENTIFIERS: tuple[str, ...] = ("AwsSecretKey",)

_NAME_OK = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_CDI_REGEX_OK = re.compile(r"^[A-Za-z0-9_#=@/;,\- ^$?\[\]{}|\\*+.]+$")
_FILTER_REGEX_OK = re.compile(r"^[A-Za-z0-9:_#=@/;,\-^$?\[\]{}|\\*+.]+$")

# Literal-ish markers every catalogue token contains, in filter-pattern regex syntax. Each class's
# entry must be implied by its Python pattern (tests prove it by property testing):
# github -> `gh[pousr]_` or `github_pat_`; slack -> `xox?-`/`xapp-`; google -> `ya29.`;
# bearer -> the word bearer in any case; aws -> `AKIA`/`ASIA`; jwt -> 16 b64url, dot, 16 b64url.
_FILTER_ALTERNATIVES: tuple[str, ...] = (
    r"gh[pousr]_",
    r"github_pat_",
    r"xox[abeprs]-",
    r"xapp-",
    r"ya29\.",
    r"A[KS]IA",
    r"[Bb][Ee][Aa][Rr][Ee][Rr]",
    # `{16,16}`, not `{16}`: CloudWatch documents only the `{m,n}` quantifier for filter regex.
    r"[A-Za-z0-9_-]{16,16}\.[A-Za-z0-9_-]{16,16}",
)


def identifier_name(class_name: str) -> str:
    # Prefixed so it can never collide with a managed identifier name.
    return "Sandbox" + "".join(part.capitalize() for part in class_name.split("_"))


def data_protection_identifiers() -> list[dict[str, str]]:
    """CustomDataIdentifier entries, one per catalogue class, validated against the limits."""
    entries = [{"Name": identifier_name(c.name), "Regex": c.cw_regex} for c in TOKEN_CLASSES]
    if len(entries) > MAX_CUSTOM_IDENTIFIERS:
        raise ValueError(
            f"{len(entries)} custom data identifiers; CloudWatch allows {MAX_CUSTOM_IDENTIFIERS}"
        )
    for entry in entries:
        if not _NAME_OK.match(entry["Name"]):
            raise ValueError(f"invalid custom data identifier name {entry['Name']!r}")
        if len(entry["Regex"]) > MAX_IDENTIFIER_REGEX or not _CDI_REGEX_OK.match(entry["Regex"]):
            raise ValueError(f"custom data identifier regex for {entry['Name']} breaks CloudWatch's limits")
    return entries


def _managed_arn(name: str) -> str:
    return f"arn:aws:dataprotection::aws:data-identifier/{name}"


def data_protection_policy(
    findings_log_group: str, *, name: str = "sandbox-token-redaction"
) -> dict[str, Any]:
    """The full policy document: audit findings to `findings_log_group`, mask at ingestion."""
    custom = data_protection_identifiers()
    identifiers = [_managed_arn(m) for m in MANAGED_IDENTIFIERS] + [c["Name"] for c in custom]
    return {
        "Name": name,
        "Description": "Masks token-shaped strings from the sandbox catalogue (SPEC section 8, layer 3)",
        "Version": POLICY_VERSION,
        "Configuration": {"CustomDataIdentifier": custom},
        "Statement": [
            {
                "Sid": "audit",
                "DataIdentifier": list(identifiers),
                "Operation": {
                    "Audit": {"FindingsDestination": {"CloudWatchLogs": {"LogGroup": findings_log_group}}}
                },
            },
            {
                "Sid": "redact",
                "DataIdentifier": list(identifiers),
                "Operation": {"Deidentify": {"MaskConfig": {}}},
            },
        ],
    }


def subscription_filter_pattern() -> str:
    """One regex filter pattern: a superset of what `findings.scan` flags (never drops a hit)."""
    regex = "|".join(_FILTER_ALTERNATIVES)
    _validate_filter_regex(regex)
    return f"%{regex}%"


def _validate_filter_regex(regex: str) -> None:
    if not _FILTER_REGEX_OK.match(regex) or "(" in regex or ")" in regex:
        raise ValueError("filter-pattern regex uses characters CloudWatch does not support")
    if re.search(r"\{\d+\}|\{\d+,\}", regex):
        raise ValueError("filter-pattern regex may only use the documented {m,n} quantifier form")
    if not regex.isascii():
        raise ValueError("filter-pattern regex must not contain multi-byte characters")


def filter_pattern_matches(pattern: str, message: str) -> bool:
    """Evaluate the subset of CloudWatch filter-pattern syntax this module emits.

    Supported: "" (matches every event) and a single `%regex%` built from the documented
    operators, which mean the same in Python's `re` (searched anywhere in the message).
    Anything else raises ValueError, so a pattern change cannot silently escape the tests.
    """
    if pattern == "":
        return True
    if len(pattern) >= 2 and pattern.startswith("%") and pattern.endswith("%"):
        regex = pattern[1:-1]
        _validate_filter_regex(regex)
        return re.search(regex, message) is not None
    raise ValueError(f"unsupported filter pattern {pattern!r}")
