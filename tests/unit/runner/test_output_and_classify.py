"""Pure parts of the runner: UTF-8 cutting, bounded buffers, classification order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from sandbox_runtime.runner.classify import classify, last_exception
from sandbox_runtime.runner.output import cut_utf8, shape
from sandbox_runtime.runner.stream import TAIL_CHARS, BoundedText


@given(text=st.text(), cap=st.integers(min_value=0, max_value=64))
def test_cut_utf8_longest_whole_character_prefix(text, cap):
    # Given any text and cap / When
    cut = cut_utf8(text, cap)
    # Then a prefix within the cap that no longer whole-character prefix would fit
    raw = cut.encode("utf-8", "surrogatepass")
    assert text.startswith(cut) and len(raw) <= cap
    if cut != text:
        assert len(raw) + len(text[len(cut)].encode("utf-8", "surrogatepass")) > cap


def test_bounded_text_keeps_head_and_tail_counts_everything():
    # Given a 1 KiB head limit and 1 MB appended in chunks
    bounded = BoundedText(1024)
    for i in range(1000):
        bounded.append(f"{i:04d}" + "x" * 995 + "\n")
    # Then memory is bounded, the count is exact, and the tail holds the end
    assert bounded.total_bytes == 1_000_000
    assert len(bounded._head) == 1024 and len(bounded.tail) == TAIL_CHARS
    assert bounded.head.startswith("0000x") and bounded.tail.endswith("x\n")
    assert "0999" in bounded.tail and bounded.complete is False


def test_bounded_text_never_splits_a_character_in_head():
    # Given a limit that falls inside a 4-byte character
    bounded = BoundedText.of("ab🙂cd", 4)
    # Then the partial character is dropped, not mangled
    assert bounded.head == "ab" and bounded.total_bytes == 8


def test_shape_flags_by_raw_bytes_and_redacts_before_cut():
    # Given output whose redacted form fits the cap though the raw bytes do not
    stream = BoundedText.of("A" * 30, 1000)
    # When the redactor shortens it
    shaped = shape(stream, cap_bytes=20, log_cap_bytes=1000, redact=lambda t: "<redacted>")
    # Then truncation is judged on raw bytes; the visible text is the redacted one
    assert (shaped.visible, shaped.full, shaped.raw_bytes, shaped.truncated) == (
        "<redacted>",
        "<redacted>",
        30,
        True,
    )


def test_last_exception_chained_traceback_takes_the_last():
    # Given a chained traceback
    stderr = (
        'Traceback (most recent call last):\n  File "<string>", line 2\nMemoryError\n\n'
        "During handling of the above exception, another exception occurred:\n\n"
        'Traceback (most recent call last):\n  File "<string>", line 4\nmypkg.errors.QuotaError: over\n'
    )
    # When / Then
    assert last_exception(stderr) == "QuotaError"
    assert last_exception("Traceback...\nMemoryError\n") == "MemoryError"
    assert last_exception("MemoryError: cannot allocate\n") == "MemoryError"
    assert last_exception("all good\n") is None


def _classify(**overrides):
    params = dict(
        timed_out=False,
        call_timeout_seconds=120,
        exit_code=0,
        stderr_tail="",
        is_error=False,
        stream_error=None,
        result_events=1,
    )
    params.update(overrides)
    return classify(**params)


def test_classify_first_match_wins_in_spec_order():
    # Given facts that match several classes at once / When / Then
    assert _classify(timed_out=True, exit_code=137, is_error=True).exit_status == "timeout"
    assert _classify(exit_code=137, is_error=True, stream_error="throttlingException").exit_status == "oom"
    assert _classify(exit_code=1, stderr_tail="MemoryError\n").exit_status == "oom"
    assert _classify(exit_code=2, is_error=True).exit_status == "error"
    assert _classify(exit_code=0, stderr_tail="warning\n").exit_status == "ok"
    assert _classify(exit_code=None, stderr_tail="").exit_status == "ok"
    assert _classify(result_events=0).failure_reason == "empty_stream"


_FRAGMENTS = [
    "\n",
    " ",
    "x",
    "Authorization: Bearer ",
    "ghp_",
    "AKIA",
    "xoxb-",
    "ya29.",
    ".",
    "eyJhbGciOiJIUzI1NiJ9",
]


@given(parts=st.lists(st.sampled_from(_FRAGMENTS + ["A" * 20, "0123456789abcdef" * 2]), max_size=400))
def test_redact_by_lines_equals_whole_text_redaction(parts):
    # Given text mixing token fragments and newlines, longer than one chunk
    from sandbox_common.redaction.catalogue import redact
    from sandbox_runtime.runner import output

    text = "".join(parts) * 60
    # When / Then: line-aligned chunking never changes the result
    assert output.redact_by_lines(text, redact) == redact(text)


def test_redact_by_lines_token_at_every_chunk_edge():
    # Given a token of every class placed around the chunk boundary, with a newline inserted at
    # every offset of the token (a token split by a newline is two non-tokens either way)
    from sandbox_common.redaction.catalogue import TOKEN_CLASSES, redact
    from sandbox_runtime.runner import output

    for token_class in TOKEN_CLASSES:
        example = token_class.examples[0]
        for pad in range(output.LINE_CHUNK_CHARS - 5, output.LINE_CHUNK_CHARS + 5):
            text = "q" * pad + "\n" + example + "\n" + "z" * 100
            # When / Then
            assert output.redact_by_lines(text, redact) == redact(text)
        for k in range(len(example)):
            text = "q" * output.LINE_CHUNK_CHARS + "\n" + example[:k] + "\n" + example[k:] + "\n"
            assert output.redact_by_lines(text, redact) == redact(text)
