"""Output the producer cut before the host saw it (the local interpreter's capture limit): the
host redacts, then drops what may be the first characters of a token."""

from __future__ import annotations

import pytest
from sandbox_common.redaction.catalogue import HOLD_CHARS, REPLACEMENT, redact
from sandbox_runtime.runner.output import drop_partial_tail, shape, source_was_cut
from sandbox_runtime.runner.stream import BoundedText

TOKEN = "ghp_" + "Q7w9" * 9


@pytest.mark.parametrize("keep", [5, 12, 20, 29])
def test_shape_source_cut_inside_a_token_leaves_no_fragment(keep):
    # Given output the source cut `keep` characters into a token (too short to be recognised)
    text = "result line\nvalue: " + TOKEN[:keep]
    stream = BoundedText.of(text, 1 << 20)
    # When it is shaped as source-cut output
    out = shape(stream, cap_bytes=1 << 20, log_cap_bytes=1 << 20, redact=redact, source_cut=True)
    # Then the fragment is gone and the text before it stays
    assert out.visible == "result line\nvalue: " and out.full == out.visible
    assert out.raw_bytes == len(text)


def test_shape_without_source_cut_keeps_an_ordinary_last_word():
    # Given output that simply ends without a newline
    stream = BoundedText.of("done in 42ms", 1 << 20)
    # When / Then nothing is dropped
    assert shape(stream, cap_bytes=100, log_cap_bytes=100, redact=redact).visible == "done in 42ms"


def test_drop_partial_tail_keeps_a_redacted_token_and_drops_bearer_words():
    # Given a complete token at the end, and a bearer header cut before its credential
    # When / Then the replacement stays; the header words and the fragment go
    assert drop_partial_tail(redact("x " + TOKEN)) == "x " + REPLACEMENT
    assert drop_partial_tail("h: 1\nAuthorization: Bearer abcd") == "h: 1\n"


def test_source_was_cut_only_when_the_producer_counted_more_than_it_sent():
    # Given what arrived, with the producer's exact count (as the stream snapshot applies it)
    arrived = BoundedText.of("value: " + TOKEN[:12], 1 << 20)
    complete = BoundedText.of("done in 42ms", 1 << 20)
    ours = BoundedText.of("y" * 100, 50)  # our own head limit cut it: the margin covers that
    arrived.total_bytes = 5_000_000
    # When / Then
    assert source_was_cut(arrived) is True
    assert source_was_cut(complete) is False
    assert source_was_cut(ours) is False


def test_drop_partial_tail_of_a_huge_run_drops_only_the_hold_back():
    # Given 1 MiB of one run of token characters, cut by the source
    text = "x" * (1 << 20)
    # When / Then only the last HOLD_CHARS characters go
    assert len(drop_partial_tail(text)) == (1 << 20) - HOLD_CHARS
