"""The token-shape catalogue: the single source of truth for every redaction layer
(docs/redaction.md).

STDLIB ONLY and self-contained (no relative imports): the in-sandbox stdio redactor ships this
very file's source into the Code Interpreter (see `stdio.preamble_source`), the CloudWatch data
protection identifiers and the subscription-filter pattern are generated from `TOKEN_CLASSES`,
the session runner calls `redact` directly, and the backstop finds tokens with `findings.scan`
(which runs this module's alternation; it stays on the host, so it is not shipped).

Design notes (why it looks like this):
- One compiled alternation, one named group per class holding the *secret part* of a match.
  For `bearer` the header words stay visible (`Authorization: Bearer <redacted>`) so the output
  is still readable; for every other class the whole match is the secret.
- A class matches wherever its prefix starts, whatever precedes it (`xghp_…`, `tokenAKIA…`),
  and its secret part runs over the WHOLE run of the class's alphabet (`TokenClass.run`), however
  long: no upper bounds, no trailing word-boundary checks. The stdio redactor holds
  back at most `HOLD_CHARS` characters; a token still running past that is redacted from its
  start and the rest of its run is dropped as it arrives (`Redactor.redact_open`).
- `redact` (and `findings.scan`) run a C-speed prefilter first (see `candidate_classes`) so that
  clean text, the overwhelmingly common case, never goes through the alternation; the results are
  exactly the bare alternation's (`_ALL`; property-tested).
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

REPLACEMENT = "<redacted>"

# Registered exact values: encoded forms shorter than this are ignored; a 4-byte
# "secret" would redact every occurrence of common words.
MIN_VALUE_FORM_BYTES = 12

# Characters a token may be made of (every class but the `bearer` header words). The stdio
# redactor holds back a trailing run of these characters because it could be a token in progress.
TOKEN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.~+/="

_B64URL = "A-Za-z0-9_-"
# RFC 6750 token68 characters, the alphabet of a bearer credential.
_TOKEN68 = r"A-Za-z0-9\-._~+/"


@dataclass(frozen=True)
class TokenClass:
    """One token shape.

    pattern:  Python regex; the named group `name` is the secret part of a match.
    cw_regex: the same shape in the regex dialect CloudWatch Logs data protection accepts
              (≤ 200 chars; no parentheses, quotes or colons — see cloudwatch.py); it masks at
              least what `pattern` matches (a corpus test runs both).
    run:      the regex character class (without brackets) the secret part ends with: once a
              match is recognised, every further character of this class belongs to it.
    examples: strings that must be flagged (each is, or contains, one token of this class).
    """

    name: str
    pattern: str
    cw_regex: str
    run: str
    examples: tuple[str, ...]


TOKEN_CLASSES: tuple[TokenClass, ...] = (
    TokenClass(
        name="github",
        # Classic tokens are 4-char prefix + 36 chars, fine-grained `github_pat_` + 82. 30/22
        # leave room for older/shorter variants while the literal prefix keeps precision. No
        # look-behind: `xghp_…` and `token=ghp_…` are tokens too. No upper bound: the whole run
        # of the alphabet is the secret, however long.
        pattern=r"(?P<github>gh[pousr]_[A-Za-z0-9_]{30,}|github_pat_[A-Za-z0-9_]{22,})",
        cw_regex=r"gh[pousr]_[A-Za-z0-9_]{30}[A-Za-z0-9_]*|github_pat_[A-Za-z0-9_]{22}[A-Za-z0-9_]*",
        run="A-Za-z0-9_",
        examples=(
            "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
            "token=gho_16C7e42F292c6912E7710c838347Ae178B4a",
            "ghu_1234567890abcdefghijABCDEFGHIJ123456",
            "ghs_abcdefghijklmnopqrstuvwxyz0123456789",
            "ghr_ZYXWVUTSRQPONMLKJIHGFEDCBA9876543210",
            "github_pat_11ABCDEFG0123456789abcd_0123456789abcdefghijABCDEFGHIJ0123456789abcdefghijABCDEFGHI",
        ),
    ),
    TokenClass(
        name="slack",
        # Real Slack tokens are ~50-80 chars; 15 after the prefix keeps `xoxb-123` style
        # placeholders out.
        pattern=r"(?P<slack>(?:xox[abeprs]|xapp)-[0-9A-Za-z-]{15,})",
        cw_regex=r"xox[abeprs]-[0-9A-Za-z-]{15}[0-9A-Za-z-]*|xapp-[0-9A-Za-z-]{15}[0-9A-Za-z-]*",
        run="0-9A-Za-z-",
        examples=(
            "xoxb-1234567890123-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
            "SLACK=xoxp-1234567890-1234567890-1234567890-0123456789abcdef0123456789abcdef",
            "xoxa-2-1234567890-abcdefghijklmnop",
            "xoxe-1-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345",
            "xoxr-abcdefghij-0123456789-xyz",
            "xoxs-1234567890-1234567890-ABCDEFabcdef",
            "xapp-1-A0123456789-1234567890123-abcdef0123456789abcdef",
        ),
    ),
    TokenClass(
        name="google_oauth",
        # Google access tokens: `ya29.` then base64url-ish text, sometimes with dots (`ya29.c.`).
        pattern=r"(?P<google_oauth>ya29\.[0-9A-Za-z_.\-]{20,})",
        cw_regex=r"ya29\.[0-9A-Za-z_.-]{20}[0-9A-Za-z_.-]*",
        run="0-9A-Za-z_.\\-",
        examples=(
            "ya29.a0AfH6SMBexampleTokenValue1234567890_abc-DEF",
            "access_token=ya29.c.b0AXv0zTexampleServiceAccountToken0123456789",
        ),
    ),
    TokenClass(
        name="bearer",
        # `Authorization: Bearer x`, any case, also JSON-quoted `"Authorization": "Bearer x"`,
        # Python-repr quoted, and JSON-inside-JSON escaped (`\"Authorization\": \"Bearer x\"`).
        # Only the credential is the secret. 16 chars minimum keeps `Bearer <token>`,
        # `Bearer REDACTED` and similar placeholders out. No upper bound (credentials of several
        # KiB exist). The credential ends at the first non-token68 character or where a glued
        # second `Authorization:` header starts, so `…<cred>Authorization: Bearer <cred2>`
        # redacts both.
        pattern=(
            r"(?i:authorization)[\\\"']{0,3}[ \t]{0,8}[:=][ \t]{0,8}[\\\"']{0,3}(?i:bearer)[ \t]{1,8}"
            r"(?P<bearer>[" + _TOKEN68 + r"]{16,}?={0,8})"
            r"(?=[^" + _TOKEN68 + r"=]|\Z|(?i:authorization)[\\\"']{0,3}[ \t]{0,8}[:=])"
        ),
        # CloudWatch data identifiers cannot contain quotes, colons, tildes or parentheses:
        # `.{1,23}` stands for the separator, `[^A-Za-z0-9]{1,8}` for the blanks after `bearer`
        # (tabs included), and the credential is "everything up to a space" (a negated class),
        # which masks a superset of the token68 alphabet.
        cw_regex=(
            r"[Aa][Uu][Tt][Hh][Oo][Rr][Ii][Zz][Aa][Tt][Ii][Oo][Nn].{1,23}"
            r"[Bb][Ee][Aa][Rr][Ee][Rr][^A-Za-z0-9]{1,8}[^ ]{16}[^ ]*"
        ),
        run=_TOKEN68 + "=",
        examples=(
            "Authorization: Bearer abcdefghijklmnop1234567890",
            '{"Authorization": "Bearer abc.def-ghi_jkl~mno+pqr/stu="}',
            "authorization: bearer 0123456789abcdefABCDEF",
            "AUTHORIZATION:BEARER ZXhhbXBsZS1iZWFyZXItdG9rZW4",
            "{'Authorization': 'Bearer sk-live-0123456789abcdef'}",
            '"{\\"authorization\\": \\"Bearer 0123456789abcdef0123\\"}"',
        ),
    ),
    TokenClass(
        name="jwt",
        # Three base64url segments, each ≥ 16 chars, then the rest of the run (a JWE's
        # further segments). Version strings (`1.2.3`), hostnames and dotted identifiers have
        # short segments. The look-behind loses nothing: base64url characters glued in front of a
        # JWT belong to its first segment, so the match starts where that run starts; it keeps
        # the scan linear (no match attempt in the middle of a long run).
        pattern=(
            r"(?<![A-Za-z0-9_-])(?P<jwt>[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"
            r"\.[A-Za-z0-9_-]{16}[A-Za-z0-9_.-]*)"
        ),
        cw_regex=(
            r"[A-Za-z0-9_-]{16}[A-Za-z0-9_-]*\.[A-Za-z0-9_-]{16}[A-Za-z0-9_-]*"
            r"\.[A-Za-z0-9_-]{16}[A-Za-z0-9_.-]*"
        ),
        run="A-Za-z0-9_.-",
        examples=(
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
            ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
            "id_token=eyJraWQiOiJrZXktMSIsImFsZyI6IlJTMjU2In0.eyJpc3MiOiJodHRwczovL2lkcCJ9"
            ".c2lnbmF0dXJlLXNpZ25hdHVyZS1zaWc",
        ),
    ),
    TokenClass(
        name="aws_access_key",
        # The key id, and whatever base64 run is glued to it: an access key id immediately
        # followed by its secret access key (`AKIA…EXAMPLEwJalrXUtnFEMI/K7MDENG…`) is one run.
        pattern=r"(?P<aws_access_key>A[KS]IA[A-Z0-9]{16}[A-Za-z0-9/+=]*)",
        cw_regex=r"A[KS]IA[A-Z0-9]{16}[A-Za-z0-9/+=]*",
        run="A-Za-z0-9/+=",
        examples=(
            "AKIAIOSFODNN7EXAMPLE",
            "aws_access_key_id = ASIAY34FZKBOKMUTVV7A",
            "AKIAIOSFODNN7EXAMPLEwJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
    ),
)

CLASS_NAMES: tuple[str, ...] = tuple(c.name for c in TOKEN_CLASSES)

# The bearer header words in front of the credential (for the stdio hold-back).
BEARER_PREFIX_MAX = len("authorization") + 3 + 8 + 1 + 8 + 3 + len("bearer") + 8

# The most the stdio redactor holds back. A held run longer than this is either released (no
# match in it) or, if a match runs to its end, redacted at once and its continuation dropped.
HOLD_CHARS = 16 * 1024 + BEARER_PREFIX_MAX

# The longest text a match needs before it is recognised (a token's minimum length, bearer
# header words included): a prefix this long decides whether a match starts at a position.
RECOGNITION_CHARS = BEARER_PREFIX_MAX + 3 * 16 + 2

# The header words of a bearer match, possibly incomplete, ending the searched region: the stdio
# redactor holds them back together with the credential that may follow.
BEARER_TAIL = re.compile(
    r"(?i:authorization)[\\\"']{0,3}[ \t]{0,8}(?:[:=][ \t]{0,8}[\\\"']{0,3}(?:(?i:bearer)[ \t]{1,8})?)?\Z"
)

# The bare alternation of every class: what `redact` (and `findings.scan`) compute, minus the prefilter. Tests
# and benchmarks compare against it.
_ALL = re.compile("|".join(c.pattern for c in TOKEN_CLASSES))

# --- Prefilter -------------------------------------------------------------------------------
# Python's `re` is fast only when a pattern starts with one literal; an alternation of six shapes
# crawls at ~10-80 MB/s. Clean text is the overwhelmingly common case (every stdout write in the
# sandbox, every log event in the backstop), so `candidate_classes` decides which classes *may*
# occur using only C-speed byte operations (`bytes.translate`, `in`, `lower`), and the
# alternation runs only over the classes it names. Each check is a NECESSARY condition of its
# class's pattern: it may fire on clean text, it never misses a match (tests pin that by
# property testing against `_ALL`). Excluding a class that matches nowhere cannot change what the
# alternation of the others finds, so `redact` and `findings.scan` equal the bare `_ALL` results.
#
# Level 1, one translate + one rfind: every token is a run of "run characters" (the union of the
# classes' alphabets: A-Za-z0-9 _ - . ~ + /) at least 16 long (a bearer credential is ≥ 16, every
# other class ≥ 20). Text without such a run (prose, tables, numbers, short log lines) is done
# after two C passes.
# Level 2, only if level 1 fired: bearer needs the word; the other classes need a run ≥ 20, and
# then: a second translate keeps only base64url runs and dots — github, slack and aws tokens are
# base64url runs ≥ 20 (paths, which fire level 1, are not), a JWT holds 16 b64url + "." + 16
# b64url; google needs "ya29.". github, slack and aws are then checked for a literal and a regex
# probe anchored on it.
_RUN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.~+/"
_B64URL_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"


def _byte_table(groups: dict[str, str], default: str) -> bytes:
    """A 256-byte `bytes.translate` table: each char of a group's key maps to the group's value."""
    table = bytearray(default.encode("ascii") * 256)
    for chars, target in groups.items():
        for ch in chars.encode("ascii"):
            table[ch] = ord(target)
    return bytes(table)


# Run characters -> "a", everything else (incl. every byte of a multi-byte UTF-8 sequence) -> " ".
_RUN_TABLE = _byte_table({_RUN_CHARS: "a"}, " ")
_RUN_ANY = b"a" * 16
# Level 1 looks for a run start (" " + 16 "a") with `rfind`, which is ~2x faster here than `find`
# of 16 "a": its pivot is the first needle byte, and " " is the rarer byte. A run at offset 0 has
# no byte in front of it: `startswith` covers that.
_RUN_START = b" " + _RUN_ANY
_RUN_NON_BEARER = b"a" * 20  # every class but bearer (google: ya29. + 20, jwt: 50)
# base64url -> "a", "." kept, everything else -> " ".
_B64_TABLE = _byte_table({_B64URL_CHARS: "a", ".": "."}, " ")
_B64_RUN = b"a" * 20  # github (gh?_ + 30, github_pat_ + 22), slack (xox?- + 15), aws (20)
_JWT_NEEDLE = b"a" * 16 + b"." + b"a" * 16
_EMPTY: frozenset[str] = frozenset()
_RUN_LOOKS = 8  # runs ≥ 16 examined one by one before level 2 decides over the whole text
_RUN_LOOKS_MIN_SIZE = 2048  # texts at most this long skip the one-by-one look

# Level-2 literal checks: a literal every token of the class contains, then, only if present, a
# regex probe anchored on one literal (`re` jumps between occurrences of a leading literal). Each
# probe exists as a str pattern (for `candidate_classes`) and, compiled from the same source, as a
# bytes pattern (for `candidate_classes_utf8`); they are ASCII without IGNORECASE, so they match
# the same places.
_RUN_PROBE_SOURCES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("github", ("gh", "github_"), r"_(?:(?<=gh[pousr]_)|(?<=github_))"),
    ("slack", ("xox", "xapp-"), r"-(?:(?<=xox[abeprs]-)|(?<=xapp-))"),
    ("aws_access_key", ("IA",), r"IA(?<=A[KS]IA)"),
)
_RUN_PROBES = tuple(
    (
        name,
        literals,
        re.compile(source),
        tuple(x.encode("ascii") for x in literals),
        re.compile(source.encode("ascii")),
    )
    for name, literals, source in _RUN_PROBE_SOURCES
)
_BY_NAME = {c.name: c for c in TOKEN_CLASSES}
_ALTERNATIONS: dict[frozenset[str], re.Pattern[str]] = {}


def candidate_classes(text: str) -> frozenset[str]:
    """Names of the classes that may occur in `text` (empty for clean text: the fast path).

    The translate checks work on the UTF-8 bytes: every pattern's run characters are ASCII, so a
    match in `text` is the same ASCII bytes in the encoding, and a multi-byte character maps to
    non-run bytes. (`bytes.find` rather than `in` on bytes: `in` first tries the operand as an
    integer and pays for the TypeError.)
    """
    data = text.encode("utf-8", "surrogatepass")
    runs = data.translate(_RUN_TABLE)
    last = runs.rfind(_RUN_START)
    if last < 0 and not runs.startswith(_RUN_ANY):
        return _EMPTY
    return _level2(data, runs, len(data), last, text)


def candidate_classes_utf8(data: bytes, end: int | None = None) -> frozenset[str]:
    """`candidate_classes(data[:end].decode())`, computed on the UTF-8 bytes without decoding.

    For the stdio redactor, which holds its output as UTF-8 already. `end` (default: all) must
    fall on a character boundary. Bytes past `end` are translated too (the stdio redactor's
    held-back tail, short) but never searched.
    """
    if end is None:
        end = len(data)
    runs = data.translate(_RUN_TABLE)
    last = runs.rfind(_RUN_START, 0, end)
    if last < 0 and not runs.startswith(_RUN_ANY, 0, end):
        return _EMPTY
    return _level2(data, runs, end, last, None)


def _level2(data: bytes, runs: bytes, end: int, last: int, text: str | None) -> frozenset[str]:
    """Level 2 over data[:end] (`text`, when given, is all of it decoded; `last` is level 1's
    `rfind` of a run start)."""
    long_run, bearer = _long_runs(data, runs, end, last)
    names: list[str] = []
    if long_run:
        b64 = data.translate(_B64_TABLE)
        if b64.find(_B64_RUN, 0, end) >= 0:
            for name, literals, probe, byte_literals, byte_probe in _RUN_PROBES:
                if text is not None:  # str `in` is the cheapest on short texts
                    for literal in literals:
                        if literal in text:
                            if probe.search(text) is not None:
                                names.append(name)
                            break
                else:
                    for byte_literal in byte_literals:
                        if data.find(byte_literal, 0, end) >= 0:
                            if byte_probe.search(data, 0, end) is not None:
                                names.append(name)
                            break
        if b64.find(_JWT_NEEDLE, 0, end) >= 0:
            names.append("jwt")
        if data.find(b"ya29.", 0, end) >= 0:
            names.append("google_oauth")
    if bearer:
        names.append("bearer")
    return frozenset(names) if names else _EMPTY


def _long_runs(data: bytes, runs: bytes, size: int, last: int) -> tuple[bool, bool]:
    """(some run in data[:size] is ≥ 20 long: any class but bearer may occur, `bearer` may occur).

    Few runs ≥ 16 (the usual case once level 1 fired): look at each, last to first (`rfind`
    is the fast direction, see _RUN_START) — its length, and the word `bearer` in the ≤ 14 bytes
    in front of it (a bearer credential is a run ≥ 16 that starts right after `bearer` + 1-8
    blanks, which are not run characters, so the credential starts a run). Many runs, or a
    short text (where two whole-text passes cost less than the loop): decide over the text
    before the runs looked at, at once.
    """
    long_run = bearer = False
    bound = size  # every run ≥ 16 starting at or after `bound` has been looked at
    for _ in range(_RUN_LOOKS if size > _RUN_LOOKS_MIN_SIZE else 0):
        start = (last if bound == size else runs.rfind(_RUN_START, 0, bound)) + 1
        if start == 0:  # no run start after a separator; maybe one at offset 0
            if not runs.startswith(_RUN_ANY, 0, bound):
                return long_run, bearer
        end = runs.find(b" ", start + 16, size)
        if end < 0:
            end = size
        if end - start >= 20:
            long_run = True
        if not bearer and data[start - 14 if start > 14 else 0 : start].lower().find(b"bearer") >= 0:
            bearer = True
        if start == 0 or (long_run and bearer):
            return long_run, bearer
        # An earlier run ends at the separator at start - 1, so its " " + 16 "a" lies in
        # [0, start - 1); this run's does not.
        bound = start - 1
        if long_run:  # only `bearer` is open: one pass over the rest beats looking run by run
            break
    # `re` has no fast case-insensitive literal search; lowering is one C pass. The letters of
    # "bearer" have no non-ASCII case variants in `re` (a test pins that), so ASCII lowering of
    # the bytes is enough.
    if not long_run:
        long_run = runs.find(_RUN_NON_BEARER, 0, bound) >= 0
    if not bearer:
        bearer = data.lower().find(b"bearer", 0, bound) >= 0
    return long_run, bearer


# --- Large texts: the lines that may hold a token ---------------------------------------------
# For artifact-sized texts (MiBs: docs/files.md) `candidate_classes` over every 64 KiB would make ~10
# C passes over all of it, some slow. `token_lines` makes nine fast ones: five byte regexes, each
# led by a literal anchor, a `lower` and a search for `bearer`, a translate and a search for the
# JWT shape (20 MiB of realistic output: 0.13 s against 0.26 s). Every match of a class contains
# its anchor (github `gh?_`/`github_pat_`, slack `xox?-`/`xapp-`, google `ya29.`, aws `A?IA`,
# bearer the word `bearer`, whose letters have no non-ASCII case variants in `re` — a test pins
# that; jwt 16 base64url + "." + 16 base64url), and no match contains a newline, so every match
# lies inside a line holding an anchor.
# One regex per literal prefix: `re` jumps between occurrences of a pattern's leading literal
# (~2 GB/s here) but tries an alternation of several at every position (~0.2 GB/s).
_ANCHORS = tuple(
    re.compile(source)
    for source in (rb"gh[pousr]_", rb"github_pat_", rb"x(?:ox[abeprs]|app)-", rb"ya29\.", rb"A[KS]IA")
)
_LINE_MERGE_GAP = 4096  # hot lines closer than this are redacted as one span (fewer calls)


def token_lines(data: bytes) -> list[tuple[int, int]]:
    """Sorted, disjoint [start, end) spans of whole lines of `data` (UTF-8) such that every
    catalogue match in `data.decode()` lies inside one span: redacting each span's text alone
    gives exactly `redact` of the whole text. Empty for text without any anchor."""
    hits = [m.start() for anchor in _ANCHORS for m in anchor.finditer(data)]
    for haystack, needle in ((data.lower(), b"bearer"), (data.translate(_B64_TABLE), _JWT_NEEDLE)):
        found = haystack.find(needle)
        while found >= 0:
            hits.append(found)
            line_end = data.find(b"\n", found)  # the whole line is taken: go on after it
            found = -1 if line_end < 0 else haystack.find(needle, line_end + 1)
    if not hits:
        return []
    hits.sort()
    spans: list[tuple[int, int]] = []
    size = len(data)
    for hit in hits:
        if spans and hit < spans[-1][1]:
            continue  # on a line already taken
        start = data.rfind(b"\n", 0, hit) + 1
        newline = data.find(b"\n", hit)
        end = size if newline < 0 else newline + 1
        if spans and start - spans[-1][1] < _LINE_MERGE_GAP:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
    return spans


def alternation(names: frozenset[str]) -> re.Pattern[str]:
    """The alternation of the named classes only (compiled once per set of names)."""
    pattern = _ALTERNATIONS.get(names)
    if pattern is None:
        pattern = re.compile("|".join(c.pattern for c in TOKEN_CLASSES if c.name in names))
        _ALTERNATIONS[names] = pattern
    return pattern


def _replace(m: re.Match[str]) -> str:
    name = m.lastgroup
    if name is None:  # a registered value (no group)
        return REPLACEMENT
    return m.string[m.start() : m.start(name)] + REPLACEMENT


def value_forms(value: str) -> set[str]:
    """The encoded forms of a registered secret that are redacted, ≥ MIN_VALUE_FORM_BYTES each."""
    raw = value.encode("utf-8", "surrogatepass")
    forms = {
        value,
        base64.b64encode(raw).decode("ascii"),
        base64.urlsafe_b64encode(raw).decode("ascii"),
        urllib.parse.quote(value, safe=""),
        urllib.parse.quote_plus(value, safe=""),
        binascii.hexlify(raw).decode("ascii"),
    }
    forms |= {f.rstrip("=") for f in forms}
    return {f for f in forms if len(f.encode("utf-8", "surrogatepass")) >= MIN_VALUE_FORM_BYTES}


class Redactor:
    """Redacts the catalogue's shapes plus any registered exact values in all their forms."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        forms: set[str] = set()
        for value in values:
            if value:
                forms |= value_forms(value)
        # Longest first so a value's cleartext is not partially replaced by a shorter form.
        ordered = sorted(forms, key=lambda f: (-len(f), f))
        self._values = re.compile("|".join(re.escape(f) for f in ordered)) if ordered else None
        self._forms = tuple(ordered)
        self._max_form = max((len(f) for f in ordered), default=0)
        # A cheap literal prefilter for values: a text holding a form holds its first 8 chars.
        self._value_heads = tuple({f[:8] for f in ordered})

    @property
    def has_values(self) -> bool:
        return self._values is not None

    def redact(self, text: str) -> str:
        if self._values is not None and any(h in text for h in self._value_heads):
            text = self._values.sub(REPLACEMENT, text)
        names = candidate_classes(text)
        if not names:
            return text
        return alternation(names).sub(_replace, text)

    def redact_open(self, text: str) -> tuple[str, str | None]:
        """`redact(text)`, and the class of a catalogue match that ends exactly at the end of
        `text` (None if there is none): more text of that class's `run` would belong to it.

        For a streaming redactor: the output of redacting a prefix of a stream equals the
        redaction of the whole stream as long as the continuation is dropped while it stays in
        the open class's run (see `continuation_pattern`).
        """
        if self._values is not None and any(h in text for h in self._value_heads):
            text = self._values.sub(REPLACEMENT, text)
        names = candidate_classes(text)
        if not names:
            return text, None
        size = len(text)
        open_class: list[str] = []

        def replace(m: re.Match[str]) -> str:
            if m.end() == size and m.lastgroup is not None:
                open_class.append(m.lastgroup)
            return _replace(m)

        redacted = alternation(names).sub(replace, text)
        return redacted, (open_class[0] if open_class else None)

    def finditer(self, text: str, pos: int = 0) -> list[re.Match[str]]:
        """Registered-value and catalogue matches at or after `pos`, in order of start."""
        matches: list[re.Match[str]] = []
        if self._values is not None:
            matches.extend(self._values.finditer(text, pos))
        names = candidate_classes(text[pos:])
        if names:
            matches.extend(alternation(names).finditer(text, pos))
        matches.sort(key=lambda m: m.start())
        return matches

    def value_hold_start(self, text: str, cut: int) -> int:
        """Move `cut` back so no registered value form is split or emitted half-written.

        Holds the longest suffix of `text` that is a proper prefix of a form, and any complete
        form that straddles `cut` (forms may contain spaces, unlike catalogue tokens).
        """
        n = len(text)
        for form in self._forms:
            for k in range(min(len(form) - 1, n), 0, -1):
                if text.endswith(form[:k]):
                    cut = min(cut, n - k)
                    break
        if self._values is not None:
            lo = cut - self._max_form
            for m in self._values.finditer(text, lo if lo > 0 else 0):
                if m.start() < cut < m.end():
                    cut = m.start()
                if m.start() >= cut:
                    break
        return cut

    def redact_bytes(self, data: bytes) -> bytes:
        """Bytes in, bytes out; undecodable bytes survive unchanged (surrogateescape round trip)."""
        text = data.decode("utf-8", "surrogateescape")
        redacted = self.redact(text)
        if redacted is text:
            return data
        return redacted.encode("utf-8", "surrogateescape")


_DEFAULT = Redactor()


def continuation_pattern(class_name: str) -> str:
    """Regex (str) matching, at the start of the next text, what still belongs to an open match."""
    return "[" + _BY_NAME[class_name].run + "]*"


def redact(text: str) -> str:
    """Replace every catalogue token shape in `text` with REPLACEMENT."""
    return _DEFAULT.redact(text)


def redact_head(text: str, max_chars: int) -> str:
    """The first `max_chars` characters of `redact(text)`: redact FIRST, then cut. Cutting first
    can leave a token's head too short to be recognised (`ghp_` + 16 chars), so every bounded
    copy of untrusted text (log fields, metric properties, reasons) goes through this."""
    return redact(text)[:max_chars]


def redact_bytes(data: bytes) -> bytes:
    return _DEFAULT.redact_bytes(data)
