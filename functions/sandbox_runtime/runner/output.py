"""Agent-visible output and host-side redaction (docs/redaction.md).

Order matters: redact first, then cut. The kept head of each stream is longer than the cap by
a margin (REDACTION_MARGIN_BYTES, larger than any token shape), so a token that starts before
the cut is whole when redaction sees it and no prefix of it survives the cut.
`*_truncated` is true iff the raw (pre-redaction) byte count exceeds the cap; byte counts are
always ints.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from sandbox_common.redaction import catalogue
from sandbox_session.redactor import hold_chain

from .stream import BoundedText

# The session runtime ships as plain source without annotations: its hold-back rule, as typed here
# (text, end, token characters, the Bearer-words pattern, their window, the longest hold).
HoldChain = Callable[[str, int, str, "re.Pattern[str]", int, int], int]
_hold_chain: HoldChain = hold_chain

REDACTION_MARGIN_BYTES = 16 * 1024
# No catalogue token shape can contain a newline, so redacting line-aligned chunks gives the
# same text as redacting the whole, and the catalogue's cheap prefilter then skips every chunk
# without a token marker (≈ 20× faster on 1 MiB of ordinary output with a few tokens).
# Registered values may contain newlines (a PEM key), so a Redactor with values is never chunked.
LINE_CHUNK_CHARS = 16 * 1024
DEFAULT_LOG_CAP_BYTES = 1024 * 1024  # redacted copy kept for the chunked CloudWatch log


def head_limit_bytes(stdout_cap: int, stderr_cap: int, log_cap: int) -> int:
    """How much of each stream the stream parser keeps in memory."""
    return max(stdout_cap, stderr_cap, log_cap) + REDACTION_MARGIN_BYTES


def redact_by_lines(text: str, redact: Callable[[str], str]) -> str:
    """`redact(text)`, computed over line-aligned chunks of about LINE_CHUNK_CHARS."""
    if len(text) <= LINE_CHUNK_CHARS:
        return redact(text)
    parts: list[str] = []
    start, size = 0, len(text)
    while start < size:
        newline = text.find("\n", start + LINE_CHUNK_CHARS)
        end = size if newline < 0 else newline + 1
        parts.append(redact(text[start:end]))
        start = end
    return "".join(parts)


def cut_utf8(text: str, cap_bytes: int) -> str:
    """At most cap_bytes of UTF-8, never splitting a character."""
    if len(text) * 4 <= cap_bytes:  # cheap: cannot exceed the cap
        return text
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= cap_bytes:
        return text
    return raw[:cap_bytes].decode("utf-8", "ignore")


def last_utf8(text: str, cap_bytes: int) -> str:
    """The end of `text`: at most cap_bytes of UTF-8, never splitting a character."""
    if len(text) * 4 <= cap_bytes:
        return text
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= cap_bytes:
        return text
    return raw[-cap_bytes:].decode("utf-8", "ignore")


def drop_partial_tail(redacted: str) -> str:
    """`redacted` (already redacted) without what may be the head of a token the SOURCE cut off:
    the trailing run of token characters, with any `Authorization: Bearer` words before it. A
    complete token there was already replaced (its `<redacted>` ends the run); what is left may
    be a token's first characters, too short to be recognised. Only for output the source
    truncated (e.g. the local interpreter's capture limit), never for output that simply ends."""
    cut = _hold_chain(
        redacted,
        len(redacted),
        catalogue.TOKEN_CHARS,
        catalogue.BEARER_TAIL,
        catalogue.BEARER_PREFIX_MAX,
        catalogue.HOLD_CHARS,
    )
    # A run longer than the hold-back (1 MiB of "x") loses only its last HOLD_CHARS characters:
    # a token head the source cut sits there, and the rest of the output stays visible.
    return redacted[: max(cut, len(redacted) - catalogue.HOLD_CHARS)]


def source_was_cut(stream: BoundedText) -> bool:
    """The producer kept less than the code wrote: its exact byte count (the local interpreter
    sends one) is above what arrived, while our own head limit was not reached."""
    return stream.held_bytes < stream.limit_bytes and stream.total_bytes > stream.held_bytes


@dataclass(frozen=True)
class ShapedOutput:
    visible: str  # redacted, cut at the agent cap
    full: str  # redacted, cut at the log cap
    raw_bytes: int
    truncated: bool


def shape(
    stream: BoundedText,
    *,
    cap_bytes: int,
    log_cap_bytes: int,
    redact: Callable[[str], str],
    source_cut: bool = False,
) -> ShapedOutput:
    """Redact, then cut. `source_cut`: the producer cut this stream before we got it (its end
    may be half a token): the partial tail is dropped after redaction."""
    redacted = redact(stream.head)
    if source_cut:
        redacted = drop_partial_tail(redacted)
    full = cut_utf8(redacted, log_cap_bytes)
    return ShapedOutput(
        visible=cut_utf8(full, cap_bytes),
        full=full,
        raw_bytes=int(stream.total_bytes),
        truncated=stream.total_bytes > cap_bytes,
    )
