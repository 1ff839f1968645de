"""What an allowlist session sends past the proxy: S3 of its region (its VPC's gateway endpoint, on
AWS) and the link-local credential endpoints; every other host goes through the proxy. Checked
with the proxy decisions Python's urllib and botocore make from the session's environment."""

from __future__ import annotations

import urllib.request

import pytest
from botocore.utils import should_bypass_proxies
from sandbox_common import naming as n
from sandbox_session import egress

PROXY = "http://sess:secret@10.65.32.10:8080"


@pytest.fixture
def session_environment(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = egress.environment(
        PROXY, "/etc/ssl/certs/ca-certificates.crt", "", n.s3_endpoint_names("eu-west-1")
    )
    for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, env[name])
    return env


@pytest.mark.parametrize(
    "host",
    [
        "s3.eu-west-1.amazonaws.com",
        "tenant-data.s3.eu-west-1.amazonaws.com",
        "s3.amazonaws.com",
        "tenant-data.s3.amazonaws.com",
        "169.254.170.2",
        "127.0.0.1",
    ],
)
def test_s3_and_local_endpoints_go_direct(session_environment: dict[str, str], host: str) -> None:
    # Given the session's environment / Then urllib and boto3 connect to these without the proxy
    assert urllib.request.proxy_bypass_environment(host)
    assert should_bypass_proxies(f"https://{host}/key")


@pytest.mark.parametrize(
    "host",
    [
        "api.example.com",
        "s3.us-east-1.amazonaws.com",  # another region's S3: not through this VPC's endpoint
        "sts.amazonaws.com",
        "evil-s3.amazonaws.com.example.com",
        "pypi.org",
    ],
)
def test_every_other_host_goes_through_the_proxy(session_environment: dict[str, str], host: str) -> None:
    assert not urllib.request.proxy_bypass_environment(host)
    assert not should_bypass_proxies(f"https://{host}/")
    assert urllib.request.getproxies_environment()["https"] == PROXY


def test_without_direct_hosts_only_loopback_and_link_local_bypass() -> None:
    assert egress.no_proxy() == "localhost,127.0.0.1,::1,169.254.169.254,169.254.170.2"
