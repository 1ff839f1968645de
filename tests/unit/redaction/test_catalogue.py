"""The token-shape catalogue: every class flagged, benign look-alikes not, values in all forms."""

from __future__ import annotations

import base64
import binascii
import hashlib
import urllib.parse

import pytest
from sandbox_common.redaction import catalogue
from sandbox_common.redaction.catalogue import REPLACEMENT, TOKEN_CLASSES, Redactor, redact
from sandbox_common.redaction.findings import fingerprint, scan

EXAMPLES = [(c.name, ex) for c in TOKEN_CLASSES for ex in c.examples]

BENIGN = [
    "Bearer",
    "the Bearer scheme is described in RFC 6750",
    "Authorization: Bearer <token>",
    "Authorization: Bearer REDACTED",
    "xoxb-",
    "xoxb-123",
    "version 1.2.3 and 10.20.30",
    "a.b.c",
    "3f2a9c1e-5b7d-4e8f-9a0b-1c2d3e4f5a6b",
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    base64.b64encode(bytes(range(256)) * 4).decode(),
    "ghp_short",
    "AKIA1234",
    "host=api.example.com path=/v1/items?id=42",
    "github_pat_tooshort",
    "ya29.short",
]


def test_catalogue_has_the_six_spec_classes():
    # Given / When
    names = [c.name for c in TOKEN_CLASSES]
    # Then
    assert names == ["github", "slack", "google_oauth", "bearer", "jwt", "aws_access_key"]


@pytest.mark.parametrize(("token_class", "example"), EXAMPLES)
def test_scan_flags_every_example_of_its_class(token_class, example):
    # Given an example of a class / When scanned
    hits = scan(example)
    # Then exactly one hit of that class
    assert [h.token_class for h in hits] == [token_class]


@pytest.mark.parametrize(("token_class", "example"), EXAMPLES)
def test_redact_removes_the_secret_part(token_class, example):
    # Given
    hit = scan(example)[0]
    secret = example[hit.start : hit.end]
    # When
    out = redact(example)
    # Then
    assert secret not in out and REPLACEMENT in out


@pytest.mark.parametrize("text", BENIGN)
def test_scan_benign_look_alike_not_flagged(text):
    # Given a benign string shaped a bit like a token / When / Then
    assert scan(text) == []
    assert redact(text) == text


def test_scan_json_quoted_bearer_keeps_header_words():
    # Given
    text = '{"headers": {"Authorization": "Bearer abcdefghijklmnop0123456789"}}'
    # When
    out = redact(text)
    # Then
    assert out == '{"headers": {"Authorization": "Bearer <redacted>"}}'


@pytest.mark.parametrize(
    "text",
    [
        "authorization: BEARER abcdefghijklmnop0123",
        "AuThOrIzAtIoN: bEaReR abcdefghijklmnop0123",
        '\\"Authorization\\": \\"Bearer abcdefghijklmnop0123\\"',
        "Authorization=Bearer abcdefghijklmnop0123",
    ],
)
def test_scan_bearer_case_and_quoting_variants(text):
    # Given / When / Then
    assert [h.token_class for h in scan(text)] == ["bearer"]


def test_scan_github_pat_and_xapp_flagged():
    # Given
    text = (
        "a github_pat_11ABCDEFG0123456789abcd_0123456789abcdefghij and xapp-1-A0123456789-1234567890123-abc"
    )
    # When
    classes = [h.token_class for h in scan(text)]
    # Then
    assert classes == ["github", "slack"]


def test_scan_hits_are_positions_only():
    # Given
    text = "key AKIAIOSFODNN7EXAMPLE end"
    # When
    (hit,) = scan(text)
    # Then the hit carries no token text, only where it is
    assert set(vars(hit)) == {"token_class", "start", "end"}
    assert text[hit.start : hit.end] == "AKIAIOSFODNN7EXAMPLE"


def test_scan_several_tokens_in_one_text_in_order():
    # Given
    text = " | ".join(c.examples[0] for c in TOKEN_CLASSES)
    # When
    hits = scan(text)
    # Then
    assert [h.token_class for h in hits] == [c.name for c in TOKEN_CLASSES]
    assert all(text[h.start : h.end] not in redact(text) for h in hits)


def test_redact_is_idempotent():
    # Given
    text = " ".join(ex for _, ex in EXAMPLES)
    # When
    once = redact(text)
    # Then
    assert redact(once) == once


def test_fingerprint_is_first_12_hex_of_sha256():
    # Given / When / Then
    assert fingerprint("AKIAIOSFODNN7EXAMPLE") == hashlib.sha256(b"AKIAIOSFODNN7EXAMPLE").hexdigest()[:12]


@pytest.mark.parametrize(
    "text, secret",
    [
        ("xghp_" + "a1B2" * 9, "ghp_" + "a1B2" * 9),
        ("tokenAKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
        (
            "AKIAIOSFODNN7EXAMPLEwJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "AKIAIOSFODNN7EXAMPLEwJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        ("ghp_" + "a" * 5000 + " end", "ghp_" + "a" * 5000),
        ("Authorization: Bearer " + "b" * 9000, "b" * 9000),
        ("idxoxb-" + "1" * 300, "xoxb-" + "1" * 300),
    ],
    ids=["glued-before", "aws-glued-before", "aws-key-id-then-secret", "github-5k", "bearer-9k", "slack-300"],
)
def test_redact_whole_run_whatever_precedes_and_however_long(text, secret):
    # Given a token glued to word characters, or far longer than its nominal length
    # When
    (hit,) = scan(text)
    out = redact(text)
    # Then the hit spans the whole run and none of it survives
    assert text[hit.start : hit.end] == secret
    assert secret[:8] not in out and REPLACEMENT in out


def test_redact_open_reports_a_match_running_to_the_end():
    # Given a text ending inside a token, and one ending after it
    redactor = Redactor()
    # When / Then
    assert redactor.redact_open("x ghp_" + "a" * 40) == ("x " + REPLACEMENT, "github")
    assert redactor.redact_open("x ghp_" + "a" * 40 + " y") == ("x " + REPLACEMENT + " y", None)


def test_recognition_chars_cover_a_minimal_bearer_match():
    # Given the widest header words and the shortest credential
    text = 'authorization\\":\t\t\t\t\t\t\t\t\\"BEARER\t\t\t\t\t\t\t\t' + "c" * 16
    # When / Then it is recognised, and within RECOGNITION_CHARS
    (hit,) = scan(text)
    assert hit.end <= catalogue.RECOGNITION_CHARS


def test_probes_never_miss_a_class_match():
    # Given every example embedded in noise
    for c in TOKEN_CLASSES:
        for ex in c.examples:
            text = "noise. " + ex + " more-noise_"
            # When
            names = catalogue.candidate_classes(text)
            # Then the class's probe fired
            assert c.name in names, (c.name, ex)


SECRET = "s3cr3t-V@lue/with spaces+and=signs"


@pytest.mark.parametrize(
    "form",
    [
        SECRET,
        base64.b64encode(SECRET.encode()).decode(),
        base64.b64encode(SECRET.encode()).decode().rstrip("="),
        base64.urlsafe_b64encode(SECRET.encode()).decode(),
        base64.urlsafe_b64encode(SECRET.encode()).decode().rstrip("="),
        urllib.parse.quote(SECRET, safe=""),
        urllib.parse.quote_plus(SECRET, safe=""),
        binascii.hexlify(SECRET.encode()).decode(),
    ],
)
def test_redactor_registered_value_every_form(form):
    # Given a redactor with one registered value
    redactor = Redactor([SECRET])
    # When the value appears in one of its encoded forms
    out = redactor.redact(f"before {form} after")
    # Then
    assert out == f"before {REPLACEMENT} after"


def test_redactor_short_forms_ignored():
    # Given a value whose forms are mostly shorter than 12 bytes
    redactor = Redactor(["abc"])
    # When / Then nothing short is redacted (would hit common words)
    assert redactor.redact("abc abcdef 616263") == "abc abcdef 616263"


def test_redactor_redact_bytes_keeps_invalid_utf8():
    # Given bytes with an invalid UTF-8 sequence and a token
    data = b"\xff\xfe AKIAIOSFODNN7EXAMPLE \x80"
    # When
    out = Redactor().redact_bytes(data)
    # Then
    assert out == b"\xff\xfe <redacted> \x80"


def test_redact_fast_path_returns_clean_text_unchanged_object():
    # Given clean text
    text = "nothing to see here " * 100
    # When / Then the prefilter short-circuits (no copy)
    assert redact(text) is text


def test_redact_glued_authorization_headers_hide_both_credentials() -> None:
    # Given two bearer headers glued together (no separator between the first credential and
    # the second header), as a careless log line concatenation produces
    first, second = "A1b2C3d4E5f6G7h8I9j0", "Z9y8X7w6V5u4T3s2R1q0"
    text = f"Authorization: Bearer {first}Authorization: Bearer {second}"
    # When redacted / Then neither credential survives
    out = redact(text)
    assert first not in out and second not in out
    assert out == "Authorization: Bearer <redacted>Authorization: Bearer <redacted>"


@pytest.mark.parametrize("cut", [10, 20, 26, 30, 45])
def test_redact_head_cuts_after_redacting(cut):
    # Given a token crossing the cut
    text = "cause: x " + "ghp_" + "Q7w9" * 9 + " tail"
    # When / Then no fragment longer than the prefix + 4 survives, whatever the cut
    out = catalogue.redact_head(text, cut)
    assert len(out) <= cut
    assert "ghp_Q7w9Q" not in out
    assert catalogue.redact_head(text, 10_000) == "cause: x " + REPLACEMENT + " tail"
