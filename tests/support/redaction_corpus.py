"""The redaction corpus: tokens of every catalogue class, in boundary and length cases,
shared by the layer 1 / 2 / 4 / data-protection corpus tests.

A case is one text holding one token. `leak(output, case)` says whether the output still shows
the token: the whole secret, or any fragment of it longer than the token's literal prefix plus
4 characters (what the issue allows to survive).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sandbox_common.redaction import REPLACEMENT

ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
UPPER_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
B64URL = ALNUM + "_-"
TOKEN68 = ALNUM + "-._~+/"
AWS_SECRET = ALNUM + "/+"

# Length cases: the nominal length, a few times longer, several KiB, and longer than the stdio
# redactor's hold-back (catalogue.HOLD_CHARS, ~16 KiB), which takes its "open match" path.
LENGTHS = ("nominal", "x3", "6k", "20k")
_LONG = {"nominal": None, "x3": 3, "6k": 6 * 1024, "20k": 20 * 1024}

# Boundary cases: what precedes and follows the token. Word characters glued on either side are
# the cases the old look-arounds missed.
CONTEXTS: tuple[tuple[str, str, str], ...] = (
    ("bare", "", ""),
    ("word-before", "token", ""),
    ("x-before", "x", ""),
    ("digit-before", "9", ""),
    ("underscore-before", "_", ""),
    ("word-after", "", "x"),
    ("suffix-after", "", "_tail9"),
    ("both", "abc", "XYZ"),
    ("json", '{"k": "', '"}'),
    ("assign", "SECRET=", "; next"),
    ("parens", "(", ")"),
    ("line", "log line one\n", "\nline three"),
)


@dataclass(frozen=True)
class Case:
    token_class: str
    name: str
    text: str
    secret: str  # the part that must not survive
    prefix: str  # a fragment up to len(prefix) + 4 may survive


def _s(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _sized(nominal: int, length: str) -> int:
    factor = _LONG[length]
    if factor is None:
        return nominal
    return nominal * factor if factor < 100 else factor


def _tokens(rng: random.Random, length: str) -> list[tuple[str, str, str, str]]:
    """(class, literal prefix, text of the token, secret part) for one length case."""
    out = []
    for prefix in ("ghp_", "gho_", "ghs_", "github_pat_"):
        body = _sized(82 if prefix == "github_pat_" else 36, length)
        token = prefix + _s(rng, ALNUM + ("_" if prefix == "github_pat_" else ""), body)
        out.append(("github", prefix, token, token))
    for prefix in ("xoxb-", "xoxp-", "xapp-"):
        token = prefix + f"{rng.randrange(10**12)}-" + _s(rng, ALNUM, _sized(24, length))
        out.append(("slack", prefix, token, token))
    token = "ya29." + _s(rng, B64URL, _sized(60, length))
    out.append(("google_oauth", "ya29.", token, token))
    cred = _s(rng, TOKEN68, _sized(40, length))
    for header in ("Authorization: Bearer ", '"Authorization": "Bearer ', "authorization:bearer\t"):
        out.append(("bearer", "", header + cred, cred))
    seg = _sized(40, length) // 3 if _LONG[length] and _LONG[length] >= 100 else _sized(40, length)
    jwt = "eyJ" + _s(rng, B64URL, seg) + ".eyJ" + _s(rng, B64URL, seg) + "." + _s(rng, B64URL, seg)
    out.append(("jwt", "", jwt, jwt))
    key_id = "AKIA" + _s(rng, UPPER_DIGITS, 16)
    out.append(("aws_access_key", "AKIA", key_id, key_id))
    # An access key id immediately followed by its secret access key (40 chars, or longer).
    glued = "ASIA" + _s(rng, UPPER_DIGITS, 16) + _s(rng, AWS_SECRET, _sized(40, length))
    out.append(("aws_access_key", "ASIA", glued, glued))
    return out


def corpus(seed: int = 10) -> list[Case]:
    rng = random.Random(seed)
    cases = []
    for length in LENGTHS:
        for cls, prefix, token, secret in _tokens(rng, length):
            for ctx, before, after in CONTEXTS:
                cases.append(
                    Case(cls, f"{cls}/{prefix or cls}/{length}/{ctx}", before + token + after, secret, prefix)
                )
    return cases


def leak(output: str, case: Case) -> str | None:
    """The longest-allowed-plus-one fragment of the secret found in `output`, else None."""
    if case.secret in output:
        return case.secret[:40]
    width = len(case.prefix) + 5
    windows = {output[i : i + width] for i in range(len(output) - width + 1)}
    for i in range(len(case.secret) - width + 1):
        fragment = case.secret[i : i + width]
        if fragment in windows:
            return fragment
    return None


def leaks(outputs: dict[int, str], cases: list[Case]) -> list[tuple[str, str]]:
    """(case name, fragment) for every case whose output (`outputs[i]` for `cases[i]`) leaks."""
    return [(case.name, found) for i, case in enumerate(cases) if (found := leak(outputs[i], case))]


def mask(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` with every span (overlapping ones merged) replaced by the catalogue's REPLACEMENT:
    what a redactor that found exactly those spans writes."""
    out, pos = [], 0
    for start, end in sorted(spans):
        out.append(text[pos:start] + REPLACEMENT)
        pos = max(pos, end)
    return "".join(out) + text[pos:]
