"""The C-speed prefilter is an optimisation only: `scan`/`redact` must equal the bare alternation
(`catalogue._ALL`) on any text, and every class whose pattern matches must be a candidate."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sandbox_common.redaction import catalogue, findings
from sandbox_common.redaction.catalogue import TOKEN_CLASSES, Redactor
from sandbox_common.redaction.findings import Hit

from tests.support.sizes import examples

ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
B64URL = ALNUM + "_-"
RUN = B64URL + ".~+/"
CLASS_PATTERNS = {c.name: re.compile(c.pattern) for c in TOKEN_CLASSES}


def _seg(alphabet: str, lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=lo, max_size=hi)


TOKENS = st.one_of(
    st.builds(
        lambda p, b: p + b, st.sampled_from(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]), _seg(ALNUM, 28, 45)
    ),
    st.builds(lambda b: "github_pat_" + b, _seg(ALNUM + "_", 20, 40)),
    st.builds(
        lambda p, b: p + b, st.sampled_from(["xoxa-", "xoxb-", "xoxp-", "xapp-"]), _seg(ALNUM + "-", 13, 30)
    ),
    st.builds(lambda b: "ya29." + b, _seg(B64URL + ".", 18, 40)),
    st.builds(
        lambda a, q, s1, b, s2, t: f"{a}{q}:{s1}{q}{b}{s2}{t}",
        st.sampled_from(["Authorization", "authorization", "AUTHORİZATION", "authorızation"]),
        st.sampled_from(["", '"', "'", '\\"']),
        st.sampled_from(["", " ", "\t"]),
        st.sampled_from(["Bearer", "bearer", "BEARER", "bEaReR"]),
        st.sampled_from([" ", "  ", "\t", " " * 8]),
        _seg(RUN, 14, 40),
    ),
    st.builds(
        lambda a, b, c: f"{a}.{b}.{c}", _seg(B64URL, 14, 30), _seg(B64URL, 14, 30), _seg(B64URL, 14, 30)
    ),
    st.builds(
        lambda p, b: p + b,
        st.sampled_from(["AKIA", "ASIA"]),
        _seg("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", 14, 18),
    ),
)
PIECES = st.one_of(
    TOKENS,
    TOKENS.flatmap(lambda t: st.integers(0, len(t)).map(lambda i: t[:i])),  # fragments
    TOKENS.flatmap(lambda t: st.integers(0, len(t)).map(lambda i: t[i:])),
    st.sampled_from(
        [
            " ",
            "\n",
            "\t",
            ":",
            "=",
            '"',
            "'",
            "\\",
            ".",
            "-",
            "_",
            "/",
            "+",
            "~",
            ", ",
            "é",
            "ı",
            "İ",
            "\u212a",
            "ſ",
            "✓",
            "\U0001f600",
            "\x00",
        ]
    ),
    _seg(RUN, 1, 24),
    st.text(max_size=12),
    st.integers(0, 300).map(lambda n: "lorem ipsum dolor sit amet 3.14 " * n),  # pushes texts past 2 KiB
)
TEXTS = st.lists(PIECES, max_size=30).map("".join)
# Texts that hold a match of some class for sure: a whole token (one of the catalogue's own
# examples, or a generated one that its class matches) between newlines, any text before and after.
WHOLE_TOKENS = st.one_of(st.sampled_from([e for c in TOKEN_CLASSES for e in c.examples]), TOKENS)
HEADS_WITH_A_TOKEN = (
    st.tuples(TEXTS, WHOLE_TOKENS)
    .map(lambda parts: f"{parts[0]}\n{parts[1]}\n")
    .filter(lambda head: any(pattern.search(head) for pattern in CLASS_PATTERNS.values()))
)

# 600 per property under `make reliability`; a representative 150 in `make test` (these three were
# 40 % of the redaction suite's time).
EXAMPLES = examples(quick=150, full=600)


def bare_hits(text: str) -> list[Hit]:
    return [Hit(m.lastgroup, m.start(m.lastgroup), m.end(m.lastgroup)) for m in catalogue._ALL.finditer(text)]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS)
def test_scan_and_redact_equal_the_bare_alternation(text):
    # Given any text built from tokens, their fragments, separators and noise
    # When / Then the prefiltered results are exactly the bare alternation's
    assert findings.scan(text) == bare_hits(text)
    assert catalogue.redact(text) == catalogue._ALL.sub(catalogue._replace, text)


def matching_classes(text: str) -> set[str]:
    return {name for name, pattern in CLASS_PATTERNS.items() if pattern.search(text)}


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(head=HEADS_WITH_A_TOKEN, tail=TEXTS)
def test_candidate_classes_never_miss_a_class_that_matches(head, tail):
    # Given a text that holds at least one token, amid tokens, fragments, separators and noise
    text = head + tail
    matched = matching_classes(text)
    assert matched  # the example holds a match: the property below is never vacuous
    # When
    names = catalogue.candidate_classes(text)
    # Then every class whose own pattern matches somewhere is a candidate
    assert matched <= names, matched - names


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(head=HEADS_WITH_A_TOKEN, tail=TEXTS, data=st.data())
def test_candidate_classes_utf8_with_end_never_miss(head, tail, data):
    # Given the UTF-8 of a text and a cut on a character boundary past a token it holds
    text = head + tail
    cut = data.draw(st.integers(len(head), len(text)))
    raw = text.encode("utf-8", "surrogatepass")
    end = len(text[:cut].encode("utf-8", "surrogatepass"))
    matched = matching_classes(text[:cut])
    assert matched  # the example holds a match before the cut: the property is never vacuous
    # When
    names = catalogue.candidate_classes_utf8(raw, end)
    # Then it never misses a class matching in text[:cut] (bytes past `end` are ignored)
    assert matched <= names, matched - names


def test_candidate_classes_long_text_with_many_runs_still_finds_late_tokens():
    # Given > 2 KiB with more runs ≥ 16 than the one-by-one look examines, tokens first and last
    filler = " ".join(f"run{i:013d}" for i in range(40))  # 40 clean 16-char runs
    text = "Authorization: Bearer abcdefghijklmnop0123 " + filler + " AKIAIOSFODNN7EXAMPLE"
    # When
    names = catalogue.candidate_classes(text)
    # Then
    assert {"bearer", "aws_access_key"} <= names
    assert [h.token_class for h in findings.scan(text)] == ["bearer", "aws_access_key"]


def test_candidate_classes_clean_text_is_empty():
    # Given prose, numbers, short ids and paths shorter than 16 between separators
    text = "the quick brown fox 3.14159 status=200 path=/api/v1/items request_id=3f2a9c1e-5b7d\n" * 50
    # When / Then
    assert catalogue.candidate_classes(text) == frozenset()
    assert catalogue.candidate_classes_utf8(text.encode()) == frozenset()


@pytest.mark.parametrize("letter", sorted(set("bearer")))
def test_bearer_letters_have_no_non_ascii_case_variants_in_re(letter):
    # Given the prefilter lowers ASCII only when looking for "bearer"
    # When every code point is matched case-insensitively against the letter
    variants = [
        chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000 and re.fullmatch(f"(?i:{letter})", chr(c))
    ]
    # Then only the ASCII upper and lower case letters match
    assert sorted(variants) == sorted({letter, letter.upper()})


def test_redactor_with_values_still_equals_bare_alternation_after_values():
    # Given a registered value and catalogue tokens
    redactor = Redactor(["correct horse battery staple"])
    text = "x correct horse battery staple y ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8 z"
    # When / Then
    assert redactor.redact(text) == "x <redacted> y <redacted> z"


def _redact_spans(data: bytes, spans: list[tuple[int, int]]) -> str:
    pieces, done = [], 0
    for start, end in spans:
        pieces += [data[done:start].decode(), catalogue.redact(data[start:end].decode())]
        done = end
    return "".join(pieces) + data[done:].decode()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(TEXTS, max_size=8))
def test_token_lines_hold_every_match(lines):
    # Given any text of several lines (tokens, fragments, separators, noise on each)
    text = "\n".join(lines)
    data = text.encode("utf-8", "surrogatepass")
    # When only the spans `token_lines` names are redacted
    spans = catalogue.token_lines(data)
    # Then the result is exactly the whole text's redaction, and the spans are whole lines, in order
    assert _redact_spans(data, spans) == catalogue.redact(text)
    assert all(s == 0 or data[s - 1 : s] == b"\n" for s, _ in spans)
    assert all(e == len(data) or data[e - 1 : e] == b"\n" for _, e in spans)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_token_lines_take_only_lines_with_an_anchor():
    # Given 10 000 clean lines with one token of each class on six of them
    tokens = [c.examples[0] for c in TOKEN_CLASSES]
    lines = [f"row {i} value={i * 3.5:.2f} id=9f2c1e0a" for i in range(10_000)]
    for k, token in enumerate(tokens):
        lines[1000 + 1500 * k] += " " + token
    data = "\n".join(lines).encode()
    # When
    spans = catalogue.token_lines(data)
    # Then each span is one line (they are far apart) and holds its token; clean text has none
    assert len(spans) == len(tokens)
    assert all(data[s:e].decode().endswith(" " + t + "\n") for (s, e), t in zip(spans, tokens, strict=True))
    assert catalogue.token_lines("\n".join(lines[:900]).encode()) == []
