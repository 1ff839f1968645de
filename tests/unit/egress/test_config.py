"""The proxy's command line: routes lead to loopback only, the index URL, fixed answers."""

from __future__ import annotations

import pytest
from egress_proxy import config


def test_parse_routes_reads_names_to_loopback_ports() -> None:
    routes = config.parse_routes("api.example.com=127.0.0.1:8443, b.example.org=127.0.0.2:9")
    assert [(r.host, r.address, r.port) for r in routes] == [
        ("api.example.com", "127.0.0.1", 8443),
        ("b.example.org", "127.0.0.2", 9),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "api.example.com=10.0.0.1:443",
        "api.example.com=127.0.0.1",
        "127.0.0.1=127.0.0.1:1",
        "x=127.0.0.1:70000",
    ],
)
def test_parse_routes_refuses_anything_but_a_name_to_a_loopback_port(text: str) -> None:
    with pytest.raises(ValueError):
        config.parse_routes(text)


def test_parse_index_url_splits_host_and_base_path() -> None:
    index = config.parse_index_url(
        "https://d-1.d.codeartifact.us-east-1.amazonaws.com/pypi/r/simple", "d:123456789012"
    )
    assert index.host == "d-1.d.codeartifact.us-east-1.amazonaws.com"
    assert index.base_path == "/pypi/r/simple/" and index.codeartifact == ("d", "123456789012")
    for bad in (
        "http://a.example.com/simple/",
        "https://u:p@a.example.com/simple/",
        "https://10.0.0.1/simple/",
    ):
        with pytest.raises(ValueError):
            config.parse_index_url(bad, None)


def test_cache_seconds_beyond_30_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    base = [
        "--stage",
        "s",
        "--confdir",
        "/tmp/x",
        "--egress-table",
        "e",
        "--counters-table",
        "c",
        "--tenants-table",
        "t",
    ]
    assert config.from_args(base).cache_seconds == config.DEFAULT_CACHE_SECONDS
    with pytest.raises(SystemExit):
        config.from_args([*base, "--cache-seconds", "45"])
    assert config.parse_resolve("a.example.com=10.0.0.1") == {"a.example.com": "10.0.0.1"}
    with pytest.raises(ValueError):
        config.parse_resolve("a.example.com=not-an-address")
