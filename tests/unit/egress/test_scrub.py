"""A secret's value and its encodings replaced in what comes back."""

from __future__ import annotations

import base64
import json
import urllib.parse

from egress_proxy.scrub import REPLACEMENT_BYTES, Scrubber

SECRET = "tok-ABC/def+123=="


def test_scrubber_replaces_the_value_and_its_encodings() -> None:
    scrubber = Scrubber([SECRET])
    forms = [
        SECRET,
        base64.b64encode(SECRET.encode()).decode(),
        urllib.parse.quote(SECRET, safe=""),
        SECRET.encode().hex(),
        json.dumps(SECRET)[1:-1],
    ]
    for form in forms:
        out, count = scrubber.bytes(f"before {form} after".encode())
        assert count == 1 and out == b"before " + REPLACEMENT_BYTES + b" after", form


def test_scrubber_replaces_a_json_escaped_value() -> None:
    scrubber = Scrubber(['pa"ss\\word-123'])
    out, count = scrubber.bytes(json.dumps({"k": 'pa"ss\\word-123'}).encode())
    assert count == 1 and b"word-123" not in out


def test_scrubber_replaces_short_values_too_and_leaves_other_text() -> None:
    scrubber = Scrubber(["abc12"])
    assert scrubber.bytes(b"xx abc12 yy") == (b"xx " + REPLACEMENT_BYTES + b" yy", 1)
    assert scrubber.bytes(b"nothing here") == (b"nothing here", 0)
    assert not Scrubber([]).active and Scrubber([""]).bytes(b"x") == (b"x", 0)


def test_scrubber_replaces_the_longest_form_first() -> None:
    scrubber = Scrubber(["Bearer tok-1234567890", "tok-1234567890"])
    assert scrubber.text("Authorization: Bearer tok-1234567890") == ("Authorization: <redacted>", 1)


def test_scrubber_replaces_the_forms_an_echoing_server_produces_next() -> None:
    # Given a secret, When a server echoes it as upper-case hex, UTF-16 or inside a longer base64
    # text (at each of the three alignments a prefix can give it)
    secret = "tok-RED-0123456789abcdef"
    scrubber = Scrubber([secret])
    echoes = [
        secret.encode().hex().upper().encode(),
        secret.encode("utf-16-le"),
        secret.encode("utf-16-be"),
        *(base64.b64encode(prefix + secret.encode()) for prefix in (b"", b"x", b"xy", b"xyz")),
        *(base64.urlsafe_b64encode(prefix + secret.encode()) for prefix in (b"x", b"xy")),
    ]
    # Then each is scrubbed
    for echo in echoes:
        out, count = scrubber.bytes(echo)
        assert count >= 1, echo
        assert secret.encode() not in out


def test_scrubber_leaves_a_base64_text_without_the_secret() -> None:
    text = base64.b64encode(b"x" * 200)
    assert Scrubber(["tok-RED-0123456789abcdef"]).bytes(text) == (text, 0)
