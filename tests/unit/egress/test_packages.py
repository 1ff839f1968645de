"""Which package-index paths a policy's `packages` allow."""

from __future__ import annotations

import pytest
from egress_proxy import packages
from sandbox_common.egress_policy import parse_policy

BASE = "/pypi/repo/simple/"
POLICY = parse_policy({"packages": ["sandbox-hello==1.0.0", "Sandbox_Colors"]})


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        (f"{BASE}sandbox-hello/", True),
        (f"{BASE}Sandbox.Hello/", True),  # any spelling of the listed name (PEP 503)
        (f"{BASE}sandbox-colors/", True),
        (f"{BASE}sandbox-hello/1.0.0/sandbox_hello-1.0.0-py3-none-any.whl", True),
        (f"{BASE}sandbox-hello/1.0.0/sandbox_hello-1.0.0-py3-none-any.whl.metadata", True),
        (f"{BASE}sandbox-hello/1.0.0/sandbox-hello-1.0.0.tar.gz", True),
        (f"{BASE}sandbox-hello/1.1.0/sandbox_hello-1.1.0-py3-none-any.whl", False),  # not the pin
        (f"{BASE}sandbox-colors/9.9/sandbox_colors-9.9-py3-none-any.whl", True),  # unpinned
        (f"{BASE}sandbox-unlisted/", False),
        (f"{BASE}sandbox-unlisted/1.0.0/sandbox_unlisted-1.0.0-py3-none-any.whl", False),
        # a listed project's path that serves another project's file
        (f"{BASE}sandbox-colors/1.0.0/sandbox_unlisted-1.0.0-py3-none-any.whl", False),
        (f"{BASE}sandbox-hello/1.0.0/sandbox_hello-1.1.0-py3-none-any.whl", False),
        (BASE, False),
        ("/simple/sandbox-hello/", False),  # outside the base
        (f"{BASE}sandbox-hello/../sandbox-unlisted/", False),
        (f"{BASE}sandbox-hello/1.0.0/..%2fsandbox_unlisted-1.0.0-py3-none-any.whl", False),
        (f"{BASE}sandbox-hello/1.0.0/sandbox_hello-1.0.0-py3-none-any.whl?x=1", False),
    ],
)
def test_index_paths_are_allowed_only_for_listed_projects_and_pins(path: str, allowed: bool) -> None:
    wanted = packages.parse_index_path(path, BASE)
    assert (wanted is not None and packages.allows(POLICY, wanted)) is allowed


def test_pinned_page_keeps_only_the_pinned_versions_links() -> None:
    links = [
        f'<a href="{v}/sandbox_hello-{v}-py3-none-any.whl">sandbox_hello-{v}-py3-none-any.whl</a><br/>'
        for v in ("1.0.0", "1.1.0")
    ]
    page = "<html><body>\n" + "\n".join(links) + "\n</body></html>"
    filtered = packages.pinned_page(page, "1.0.0")
    assert "sandbox_hello-1.0.0" in filtered and "sandbox_hello-1.1.0" not in filtered
