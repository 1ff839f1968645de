"""One redaction corpus through every layer of redaction (docs/redaction.md).

Every class, with word characters glued before and after it and at lengths from nominal to
longer than the stdio hold-back, through layer 2 (the session runner's host-side
redaction), layer 4 (the backstop's scan of a real subscription payload) and layer 3 (the
CloudWatch data protection custom identifiers as the policy configures them, plus the
subscription filter that feeds the backstop). Zero complete tokens survive, and no fragment
longer than the token's prefix plus 4 characters. Layer 1, the in-sandbox stdio redactor, runs
the same corpus in a real interpreter: tests/integration/redaction/test_corpus_stdio.py.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from collections import Counter

from backstop import scanner
from sandbox_common.redaction import REPLACEMENT, TOKEN_CLASSES
from sandbox_common.redaction.cloudwatch import (
    data_protection_policy,
    filter_pattern_matches,
    subscription_filter_pattern,
)
from sandbox_runtime.runner.execution import host_redactor

from tests.support.redaction_corpus import CONTEXTS, LENGTHS, corpus, leak, leaks, mask

CASES = corpus()


def test_corpus_covers_every_class_length_and_boundary():
    # Given / When the corpus / Then every class appears in every length and boundary case
    seen = Counter((c.token_class, c.name.split("/")[2], c.name.split("/")[3]) for c in CASES)
    expected = {(t.name, ln, ctx[0]) for t in TOKEN_CLASSES for ln in LENGTHS for ctx in CONTEXTS}
    assert set(seen) == expected
    assert max(len(c.secret) for c in CASES) > 20 * 1024


def test_corpus_leak_check_flags_a_surviving_fragment():
    # Given a case and outputs that keep the whole token, a prefix + 5 fragment, a prefix + 4 one
    case = next(c for c in CASES if c.prefix == "ghp_")
    # When / Then only the allowed fragment passes
    assert leak(case.text, case) is not None
    assert leak("x " + case.secret[:9] + " y", case) is not None
    assert leak("x " + case.secret[:8] + REPLACEMENT, case) is None


def test_layer2_host_redaction_leaves_no_token_of_the_corpus():
    # Given the session runner's redaction (the catalogue, line-chunked)
    redact = host_redactor(None)
    # When every case is redacted
    outputs = {i: redact(case.text) for i, case in enumerate(CASES)}
    # Then nothing survives
    assert len(outputs) == len(CASES)
    assert leaks(outputs, CASES) == []


def _subscription_payload(messages: list[str]) -> dict:
    document = {
        "messageType": "DATA_MESSAGE",
        "owner": "123456789012",
        "logGroup": "/aws/lambda/sandbox-dispatch-dev",
        "logStream": "2026/11/23/[$LATEST]corpus",
        "subscriptionFilters": ["backstop"],
        "logEvents": [
            {"id": str(i), "timestamp": 1_795_000_000_000 + i, "message": m} for i, m in enumerate(messages)
        ],
    }
    return {"awslogs": {"data": base64.b64encode(gzip.compress(json.dumps(document).encode())).decode()}}


def test_layer4_backstop_flags_every_token_of_the_corpus():
    # Given the corpus as one real subscription payload, decoded as the backstop decodes it
    decoded = scanner.decode(_subscription_payload([c.text for c in CASES]))
    # When the backstop scans it
    result = scanner.scan_events(decoded)
    # Then every event has a finding of its class, and the spans it flags cover every token
    classes = {(int(f["event_id"]), f["token_class"]) for f in result.findings}
    missing = [c.name for i, c in enumerate(CASES) if (i, c.token_class) not in classes]
    assert missing == []
    outputs = {i: mask(c.text, [(h.start, h.end) for h in scanner.scan(c.text)]) for i, c in enumerate(CASES)}
    assert leaks(outputs, CASES) == []


_B64_RUN_CLASS = "[A-Za-z0-9_-]"


def _cw_evaluator(regex: str) -> re.Pattern:
    """The identifier's regex for Python's `re`. One identifier (jwt) starts with the character
    class its run is made of; Python's backtracking search retries it at every position of a long
    run (quadratic on the 20 KiB cases), so attempts are anchored at run starts. That finds the
    same matches: a match starting inside a run implies one starting at the run's start (the
    leading class absorbs the run), and leftmost search picks that one. The test below pins the
    equivalence on the cases short enough to run both."""
    if regex.startswith(_B64_RUN_CLASS):
        return re.compile(f"(?<!{_B64_RUN_CLASS})(?:{regex})")
    return re.compile(regex)


def _cw_identifiers() -> list[str]:
    policy = data_protection_policy("/thinkwork/dev/sandbox/data-protection-findings")
    return [entry["Regex"] for entry in policy["Configuration"]["CustomDataIdentifier"]]


def _cwmask(regexes: list[re.Pattern], text: str) -> str:
    return mask(text, [(m.start(), m.end()) for rx in regexes for m in rx.finditer(text)])


def test_layer3_run_start_anchoring_finds_the_same_matches():
    # Given the identifiers as configured and as evaluated here
    configured = [re.compile(r) for r in _cw_identifiers()]
    evaluated = [_cw_evaluator(r) for r in _cw_identifiers()]
    short = [c for c in CASES if len(c.text) < 1024]
    assert len(short) > 200
    # When / Then both mask exactly the same text on every short case
    assert [c.name for c in short if _cwmask(configured, c.text) != _cwmask(evaluated, c.text)] == []


def test_layer3_data_protection_identifiers_mask_every_token_of_the_corpus():
    # Given the custom data identifiers exactly as the log groups' policy configures them
    regexes = [_cw_evaluator(r) for r in _cw_identifiers()]
    assert len(regexes) == len(TOKEN_CLASSES)
    # When CloudWatch masks every match of every identifier
    outputs = {i: _cwmask(regexes, case.text) for i, case in enumerate(CASES)}
    # Then nothing survives: the identifiers and the catalogue agree on the corpus
    assert leaks(outputs, CASES) == []


def test_layer4_subscription_filter_forwards_every_case_of_the_corpus():
    # Given the subscription filter that feeds the backstop
    pattern = subscription_filter_pattern()
    # When / Then every corpus event passes it (the prefilter never hides a token)
    dropped = [c.name for c in CASES if not filter_pattern_matches(pattern, c.text)]
    assert dropped == []
    assert len(CASES) > 600


def test_corpus_check_fails_on_bounded_patterns_with_word_boundaries():
    # Given bounded shapes with word-boundary look-arounds, for github/aws
    old = re.compile(
        r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{30,251})(?![A-Za-z0-9])"
        r"|(?<![A-Za-z0-9])(?:A[KS]IA[A-Z0-9]{16})(?![A-Za-z0-9])"
    )
    # (github tokens of 20 KiB; access key ids glued to their secret)
    chosen = [c for c in CASES if (c.token_class == "github" and "/20k/" in c.name) or c.prefix == "ASIA"]
    assert len(chosen) == 4 * len(CONTEXTS) + len(LENGTHS) * len(CONTEXTS)
    # When they redact the corpus
    outputs = {CASES.index(c): old.sub(REPLACEMENT, c.text) for c in chosen}
    # Then the leak check catches them (the corpus tests above can fail)
    leaked = [c.name for c in chosen if leak(outputs[CASES.index(c)], c)]
    assert len(leaked) == len(chosen)
