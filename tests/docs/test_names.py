"""The code names the README, docs/ and runbooks/ cite still name code of the repository: every
repository path, dotted module name, `module.function` and `Class.method` in backticks resolves
(tests/docs/names.py reads the code, it imports none of it)."""

from __future__ import annotations

from pathlib import Path

from tests.docs.names import Cited, Repository, cited

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "runbooks").glob("*.md"))]


def test_docs_cite_only_code_that_exists() -> None:
    # Given every path and name the README, docs/ and runbooks/ cite
    repository = Repository(ROOT)
    cites = [(page, cite) for page in PAGES for cite in cited(page.read_text(encoding="utf-8"))]
    # When resolving each against the code
    problems = [
        f"{page.relative_to(ROOT)}:{cite.line}: `{cite.text}`: {problem}"
        for page, cite in cites
        if (problem := repository.problem(cite))
    ]
    # Then each names a file, module, function, class or member that exists
    assert sum(c.kind == "path" for _, c in cites) > 100  # the docs cite paths and names: the check ran
    assert sum(c.kind == "name" for _, c in cites) > 50
    assert problems == []


_FAKE_MODULE = """
import os
from .base import Base as Renamed


class Thing(Renamed):
    size: int = 0

    def __init__(self) -> None:
        self.count = 0

    def run(self) -> None:
        pass


class Child(Thing):
    pass


def make():
    def inner():
        pass
    return inner


CONSTANT = 1
"""


def _fake_repository(root: Path) -> Repository:
    files = {
        "functions/pkg/__init__.py": "",
        "functions/pkg/mod.py": _FAKE_MODULE,
        "functions/pkg/base.py": "class Base:\n    def shared(self):\n        pass\n",
        "layers/common/python/common_pkg/__init__.py": "from common_pkg.naming import CONSTANT\n",
        "layers/common/python/common_pkg/naming.py": "CONSTANT = 'x'\n",
        "layers/common/python/starred/__init__.py": "from .kinds import *\n",
        "layers/common/python/starred/kinds.py": "class Kind:\n    A = 1\n\n\nVALUE = 2\n",
        "infra/__init__.py": "",
        "infra/local/__init__.py": "",
        "infra/local/state.py": "def read():\n    pass\n",
        "tests/__init__.py": "",
        "tests/support/__init__.py": "",
        "tests/support/http.py": "def serve():\n    pass\n",
        "docs/page.md": "",
    }
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return Repository(root)


_FAKE_DOC = """
Resolves: `pkg.mod.Thing.run`, `pkg.mod.make`, `mod.CONSTANT`, `Thing.count`, `Thing.size()`,
`Child.run`, `Child.shared`, `pkg.mod.Renamed.shared`, `common_pkg.naming.CONSTANT`,
`common_pkg.CONSTANT`, `infra.local.state.read`, `mod.inner`, `mod.count` (an instance),
`functions/pkg/mod.py`, `functions/pkg/`, `infra/local/*.py`, `pkg/mod.py`, `mod.py`,
`functions/pkg/mod.py::Thing`, `docs/page.md`, `starred.VALUE`, `starred.Kind.A` (re-exported whole).
Not names of ours: `os.write`, `context.aws_request_id`, `egress.sandbox.internal`, `/opt/python`,
`http.server` (the library's, beside our `http.serve`).
Not cited: `sandboxctl caps get acme`, `aws.client("sts")`, `{tenant}/x.json`, `"pkg.mod.x"`,
`make test`, `outputs/figure-1.png`, `s3://bucket/key`.
Does not resolve: `pkg.mod.gone`, `pkg.missing`, `mod.gone`, `Thing.gone`, `Child.gone`,
`common_pkg.naming.OTHER`, `infra.local.gone`, `functions/pkg/nope.py`, `tests/nowhere/`,
`nope.py`, `gone/mod.py`, `functions/pkg/mod.py::gone`, `Unknown.attr`, `state.gone`, `starred.OTHER`.
"""


def test_names_parser_and_resolver_on_a_fake_doc(tmp_path: Path) -> None:
    # Given a small fake repository and a doc that cites its code, other systems' names and prose
    repository = _fake_repository(tmp_path)
    cites = cited(_FAKE_DOC)
    # When resolving every cited span
    problems = {c.text for c in cites if repository.problem(c)}
    # Then exactly the spans that name nothing of ours fail, and commands and prose are not cited
    assert problems == {
        "pkg.mod.gone",
        "pkg.missing",
        "mod.gone",
        "Thing.gone",
        "Child.gone",
        "common_pkg.naming.OTHER",
        "infra.local.gone",
        "functions/pkg/nope.py",
        "tests/nowhere/",
        "nope.py",
        "gone/mod.py",
        "functions/pkg/mod.py::gone",
        "Unknown.attr",
        "state.gone",
        "starred.OTHER",
    }
    texts = {c.text for c in cites}
    assert {"pkg.mod.Thing.run", "Thing.size", "functions/pkg/", "mod.py", "os.write", "http.server"} <= texts
    for not_cited in ("sandboxctl caps get acme", 'aws.client("sts")', "{tenant}/x.json", "make test"):
        assert not_cited not in texts
    assert not any(t.startswith(("outputs/", "s3:", "/opt", '"')) for t in texts)
    # and every cite carries its line
    assert Cited("name", "pkg.mod.gone", 11) in cites
