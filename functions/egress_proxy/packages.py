"""Which paths of the stage's package index a policy's `packages` allow (pure).

The index speaks the simple repository API (PEP 503) under one base path (`/simple/` locally,
`/pypi/{repository}/simple/` on CodeArtifact):

    {base}{project}/                               the project's page (links to its files)
    {base}{project}/{version}/{filename}           one file (wheel, sdist, or its `.metadata`)

A project page is allowed for a listed project; a file when its path's project and version and
its file name's own project and version agree, the project is listed, and a pinned version
(`name==1.2`) is the file's. Everything else on the index host is refused: the root listing, other
paths, other projects, traversal, queries on files.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from sandbox_common.egress_policy import EgressPolicy, normalize_package

_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VERSION_RE = re.compile(r"^[A-Za-z0-9.+!_-]{1,64}$")
_WHEEL_RE = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[A-Za-z0-9.+!_]+)(-[^-/]+){2,3}\.whl$")
_SDIST_RE = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+?)-(?P<version>[A-Za-z0-9.+!_]+)\.(tar\.gz|zip)$")


@dataclass(frozen=True)
class IndexRequest:
    project: str  # normalized (PEP 503)
    version: str | None = None  # None: the project's page
    filename: str | None = None


def parse_index_path(path: str, base: str) -> IndexRequest | None:
    """The project (and file) a request path names, or None when it is not one the index serves
    to pip (outside `base`, the root listing, traversal, a malformed name)."""
    raw_path, _, query = path.partition("?")
    if not raw_path.startswith(base):
        return None
    rest = urllib.parse.unquote(raw_path[len(base) :])
    if "\\" in rest or "\0" in rest:
        return None
    parts = rest.split("/")
    if any(p in (".", "..") for p in parts):
        return None
    if len(parts) == 2 and parts[1] == "" and _NAME_RE.match(parts[0]):
        return IndexRequest(normalize_package(parts[0]))
    if len(parts) == 3 and not query and _NAME_RE.match(parts[0]) and _VERSION_RE.match(parts[1]):
        project, version, filename = normalize_package(parts[0]), parts[1], parts[2]
        named = _file_project_version(filename)
        if named is None or named != (project, _normalize_version(version)):
            return None
        return IndexRequest(project, version, filename)
    return None


def _normalize_version(version: str) -> str:
    return version.lower().replace("_", "-")


def _file_project_version(filename: str) -> tuple[str, str] | None:
    name = filename.removesuffix(".metadata")
    for pattern in (_WHEEL_RE, _SDIST_RE):
        match = pattern.match(name)
        if match:
            return normalize_package(match.group("name")), _normalize_version(match.group("version"))
    return None


def allows(policy: EgressPolicy, request: IndexRequest) -> bool:
    """May this index request be forwarded under the policy's `packages`?"""
    listed = policy.package(request.project)
    if listed is None:
        return False
    if request.version is None or listed.version is None:
        return True
    return _normalize_version(request.version) == _normalize_version(listed.version)


# A project page's file links (PEP 503: one anchor per file, its text the file name).
_ANCHOR_RE = re.compile(r"<a\s[^>]*>\s*([^<\s]+)\s*</a>\s*(<br\s*/?>)?\s*", re.IGNORECASE)
# What the proxy asks the index for on a pinned project's page: the HTML form, which it filters.
PROJECT_PAGE_ACCEPT = "text/html"


def pinned_page(html: str, version: str) -> str:
    """A project page with only the links to files of `version`: pip then picks the pinned
    version itself instead of failing on a newer file the proxy would refuse."""
    wanted = _normalize_version(version)

    def keep(match: re.Match[str]) -> str:
        named = _file_project_version(match.group(1))
        return match.group(0) if named is not None and named[1] == wanted else ""

    return _ANCHOR_RE.sub(keep, html)
