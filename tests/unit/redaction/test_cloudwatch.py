"""CloudWatch artefacts generated from the catalogue: documented limits, and a subscription
filter pattern that never drops an event the backstop would flag."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sandbox_common.redaction import TOKEN_CLASSES, scan
from sandbox_common.redaction.cloudwatch import (
    data_protection_identifiers,
    data_protection_policy,
    filter_pattern_matches,
    subscription_filter_pattern,
)

CDI_ALLOWED = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_#=@/;,- ^$?[]{}|\\*+.")
FILTER_ALLOWED = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_#=@/;,-^$?[]{}|\\*+.")


def test_identifiers_one_per_class_within_documented_limits():
    # Given / When
    identifiers = data_protection_identifiers()
    # Then ≤ 10 identifiers, names ≤ 128 of [A-Za-z0-9_-], regex ≤ 200 of the allowed set
    assert len(identifiers) == len(TOKEN_CLASSES) <= 10
    for entry in identifiers:
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,128}", entry["Name"])
        assert len(entry["Regex"]) <= 200
        assert set(entry["Regex"]) <= CDI_ALLOWED, entry


@pytest.mark.parametrize("token_class", TOKEN_CLASSES, ids=lambda c: c.name)
def test_identifier_regex_masks_every_example(token_class):
    # Given the CloudWatch regex of a class (its syntax is a subset of Python's re)
    regex = re.compile(token_class.cw_regex)
    for example in token_class.examples:
        # When / Then the secret part of each example is covered by a CloudWatch match
        (hit,) = scan(example)
        assert any(m.start() <= hit.start and hit.end <= m.end() for m in regex.finditer(example)), example


def test_policy_audits_to_findings_group_and_masks_same_identifiers():
    # Given / When
    policy = data_protection_policy("/thinkwork/dev/sandbox/data-protection-findings")
    audit, deidentify = policy["Statement"]
    # Then
    assert policy["Version"] == "2021-06-01"
    assert audit["Operation"]["Audit"]["FindingsDestination"] == {
        "CloudWatchLogs": {"LogGroup": "/thinkwork/dev/sandbox/data-protection-findings"}
    }
    assert deidentify["Operation"] == {"Deidentify": {"MaskConfig": {}}}
    assert audit["DataIdentifier"] == deidentify["DataIdentifier"]
    custom = [c["Name"] for c in policy["Configuration"]["CustomDataIdentifier"]]
    assert set(custom) < set(audit["DataIdentifier"])
    assert "arn:aws:dataprotection::aws:data-identifier/AwsSecretKey" in audit["DataIdentifier"]


def test_filter_pattern_uses_only_documented_syntax():
    # Given / When
    pattern = subscription_filter_pattern()
    # Then one %regex%, allowed characters, no parentheses, ASCII
    assert pattern.startswith("%") and pattern.endswith("%") and pattern.count("%") == 2
    assert set(pattern[1:-1]) <= FILTER_ALLOWED
    assert pattern.isascii()


@pytest.mark.parametrize("example", [ex for c in TOKEN_CLASSES for ex in c.examples])
def test_filter_pattern_matches_every_example(example):
    # Given / When / Then
    assert filter_pattern_matches(subscription_filter_pattern(), f"INFO {example} done")


def test_filter_pattern_evaluator_rejects_unsupported_syntax():
    # Given / When / Then
    with pytest.raises(ValueError):
        filter_pattern_matches("%(a|b)%", "a")
    with pytest.raises(ValueError):
        filter_pattern_matches('{ $.x = "y" }', "a")
    assert filter_pattern_matches("", "anything")


B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _seg(alphabet: str, lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=lo, max_size=hi)


TOKENS = st.one_of(
    st.builds(
        lambda p, b: p + b, st.sampled_from(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]), _seg(ALNUM, 30, 60)
    ),
    st.builds(lambda b: "github_pat_" + b, _seg(ALNUM + "_", 22, 90)),
    st.builds(
        lambda p, b: p + b,
        st.sampled_from(["xoxa-", "xoxb-", "xoxe-", "xoxp-", "xoxr-", "xoxs-", "xapp-"]),
        _seg(ALNUM + "-", 15, 60),
    ),
    st.builds(lambda b: "ya29." + b, _seg(B64URL + ".", 20, 80)),
    st.builds(
        lambda a, q, s1, s2, b, t: f"{a}{q}:{s1}{q}{b} {t}",
        st.sampled_from(["Authorization", "authorization", "AUTHORIZATION", "aUtHoRiZaTiOn"]),
        st.sampled_from(["", '"', "'", '\\"']),
        st.sampled_from(["", " ", "  "]),
        st.sampled_from(["", " "]),
        st.sampled_from(["Bearer", "bearer", "BEARER", "bEaReR"]),
        _seg(ALNUM + "-._~+/", 16, 60),
    ),
    st.builds(
        lambda a, b, c: f"{a}.{b}.{c}", _seg(B64URL, 16, 40), _seg(B64URL, 16, 40), _seg(B64URL, 16, 40)
    ),
    st.builds(
        lambda p, b: p + b,
        st.sampled_from(["AKIA", "ASIA"]),
        _seg("ABCDEFGHIJKLMNOPQRSTUVWXYZ0234567", 16, 16),
    ),
)
NOISE = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=NOISE, token=TOKENS, after=NOISE)
def test_filter_pattern_never_drops_what_scan_flags(before, token, after):
    # Given a message holding a token-shaped string amid arbitrary text
    message = f"{before} {token} {after}"
    # When the backstop's scanner flags it
    flagged = bool(scan(message))
    # Then the subscription filter delivers it to the backstop
    if flagged:
        assert filter_pattern_matches(subscription_filter_pattern(), message)


@settings(max_examples=300, deadline=None)
@given(message=st.text(max_size=200))
def test_filter_pattern_superset_of_scan_on_arbitrary_text(message):
    # Given arbitrary text / When / Then
    if scan(message):
        assert filter_pattern_matches(subscription_filter_pattern(), message)


@settings(max_examples=300, deadline=None)
@given(token=TOKENS)
def test_generated_tokens_are_flagged_by_scan(token):
    # Given a generated token of any class / When / Then scan flags it (the property above is not vacuous)
    assert scan(f" {token} ")


def test_subscription_filter_pattern_uses_only_documented_quantifiers() -> None:
    import re

    from sandbox_common.redaction.cloudwatch import subscription_filter_pattern

    # CloudWatch documents `{m,n}` only; `{n}` / `{n,}` might be rejected at deploy time
    assert not re.search(r"\{\d+\}|\{\d+,\}", subscription_filter_pattern())
