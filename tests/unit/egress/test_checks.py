"""The proxy's pure checks on names, addresses and request heads."""

from __future__ import annotations

import pytest
from egress_proxy import checks


@pytest.mark.parametrize(
    "raw", ["api.example.com", "API.Example.COM.", "a-b.c-d.example.org", "xn--bcher-kva.example"]
)
def test_check_host_accepts_dns_names(raw: str) -> None:
    assert checks.check_host(raw) == raw.lower().rstrip(".")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("allowed.com@evil.com", checks.USERINFO),
        ("user:pw@api.example.com", checks.USERINFO),
        ("127.0.0.1", checks.IP_LITERAL),
        ("[::1]", checks.IP_LITERAL),
        ("::ffff:169.254.169.254", checks.IP_LITERAL),
        ("2130706433", checks.IP_LITERAL),
        ("0177.0.0.1", checks.IP_LITERAL),
        ("0x7f.1", checks.IP_LITERAL),
        ("0x7f000001", checks.IP_LITERAL),
        ("169.254.169.254", checks.IP_LITERAL),
        ("localhost", checks.BAD_HOST),
        ("api.exa mple.com", checks.BAD_HOST),
        ("api%2eexample.com", checks.BAD_HOST),
        ("bücher.example", checks.BAD_HOST),
        ("-bad.example.com", checks.BAD_HOST),
        ("a" * 64 + ".example.com", checks.BAD_HOST),
        ("", checks.BAD_HOST),
    ],
)
def test_check_host_refuses_what_is_not_a_plain_dns_name(raw: str, reason: str) -> None:
    with pytest.raises(checks.HostRefused) as refused:
        checks.check_host(raw)
    assert refused.value.reason == reason


def test_split_host_header_takes_the_port_and_checks_the_name() -> None:
    assert checks.split_host_header("api.example.com", 443) == ("api.example.com", 443)
    assert checks.split_host_header("API.example.com:8443", 443) == ("api.example.com", 8443)
    with pytest.raises(checks.HostRefused) as refused:
        checks.split_host_header("a.example.com@b.example.com", 443)
    assert refused.value.reason == checks.USERINFO
    with pytest.raises(checks.HostRefused):
        checks.split_host_header("api.example.com:99999", 443)


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.1.2.3", "private"),
        ("172.16.0.9", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "reserved"),  # shared address space (carrier NAT)
        ("192.0.2.1", "private"),  # documentation
        ("::ffff:169.254.169.254", "link-local"),  # IPv4-mapped
        ("2002:a9fe:a9fe::1", "link-local"),  # 6to4 of 169.254.169.254
        ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of 169.254.169.254
    ],
)
def test_address_refusal_names_every_non_public_address(address: str, why: str) -> None:
    assert checks.address_refusal(address) == why


def test_address_refusal_passes_public_unicast() -> None:
    assert checks.address_refusal("93.184.216.34") is None
    assert checks.address_refusal("2606:2800:220:1::1") is None


def test_first_public_refuses_a_name_if_any_answer_is_not_public() -> None:
    assert checks.first_public(["93.184.216.34", "93.184.216.35"]) == ("93.184.216.34", None)
    chosen, why = checks.first_public(["93.184.216.34", "10.0.0.1"])
    assert chosen is None and why == "10.0.0.1 is private"
    assert checks.first_public([]) == (None, "no address")


def test_head_size_counts_line_and_headers() -> None:
    size = checks.head_size("GET", "/x", [(b"Host", b"a.example.com"), (b"X", b"y" * 100)])
    assert size == len("GET /x HTTP/1.1\r\n") + 2 + len("Host: a.example.com\r\n") + len("X: ") + 100 + 2


@pytest.mark.parametrize(
    ("value", "one_line"),
    [
        ("Bearer tok-123", True),
        ("Bearer\ttok-123", True),
        ("tok\r\nX-Injected: yes", False),
        ("tok\nsecond", False),
        ("tok\rsecond", False),
        ("tok\0", False),
        ("tok\x7f", False),
        ("tok\u2028second", False),
        ("tok\x85second", False),
    ],
)
def test_is_header_value_refuses_what_would_split_a_header_line(value: str, one_line: bool) -> None:
    assert checks.is_header_value(value) is one_line
