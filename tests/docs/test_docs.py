"""The README and docs/ as a newcomer and the next engineer read them: a README that fits, links
that resolve in any clone, one row per benchmark, and what is (no history of issues or sessions, no
section of a spec the checkout does not hold)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
RUNBOOKS = sorted((ROOT / "runbooks").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
HISTORY = re.compile(r"\b(?:[Ii]ssues?|[Ss]essions?) [0-9]+\b")


def _relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(path.read_text(encoding="utf-8")) if "://" not in t]


def test_readme_fits_a_newcomer_and_names_the_spec_without_a_path_outside_the_checkout() -> None:
    # Given the README
    text = README.read_text(encoding="utf-8")
    # When measuring it and reading its links
    links = _relative_links(README)
    # Then it is at most 300 lines, and no link leaves the checkout
    assert len(text.splitlines()) <= 300
    assert links and [t for t in links if t.startswith("..") or t.startswith("/")] == []


def test_docs_links_resolve_in_the_checkout() -> None:
    # Given every relative link of the README, docs/ and runbooks/
    pages = [README, *DOCS, *RUNBOOKS]
    # When resolving each against its page's directory
    broken = [
        f"{page.relative_to(ROOT)} -> {target}"
        for page in pages
        for target in _relative_links(page)
        if not (page.parent / target).exists()
    ]
    # Then each names a file of the checkout
    assert sum(len(_relative_links(p)) for p in pages) > 20  # the loop above had links to check
    assert broken == []


def _benchmark_names() -> set[str]:
    """Every name a benchmark emits: the first argument of `emit(...)` in tests/benchmarks/."""
    names = set()
    for path in (ROOT / "tests" / "benchmarks").glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "emit"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                names.add(str(node.args[0].value))
    return names


def test_benchmarks_md_has_one_row_per_benchmark() -> None:
    # Given the benchmarks tests/benchmarks/ emits and the rows of docs/benchmarks.md
    names = _benchmark_names()
    rows = re.findall(r"^\| `([a-z_]+)` \|", (ROOT / "docs" / "benchmarks.md").read_text(), re.M)
    # When comparing them
    # Then every benchmark has exactly one row, and every row is a benchmark
    assert len(names) > 10
    assert sorted(rows) == sorted(names)


def test_readme_docs_and_runbooks_state_what_is_not_which_issue_or_session_brought_it() -> None:
    # Given the README, docs/ and runbooks/
    pages = [README, *DOCS, *RUNBOOKS]
    # When looking for "issue N" / "session N"
    found = [
        f"{page.relative_to(ROOT)}:{i}: {line.strip()}"
        for page in pages
        for i, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if HISTORY.search(line)
    ]
    # Then there is none
    assert found == []


SECTION_SIGN = "\u00a7"  # how a text cites a numbered section of the spec, which is not in the checkout


def test_readme_docs_runbooks_and_tests_cite_no_section_of_the_spec() -> None:
    # Given the README, docs/, runbooks/ and every text file under tests/
    pages = [README, *DOCS, *RUNBOOKS]
    pages += [p for p in sorted((ROOT / "tests").rglob("*")) if p.suffix in {".py", ".md", ".json", ".txt"}]
    # When looking for a section sign
    found = [
        f"{page.relative_to(ROOT)}:{i}: {line.strip()[:120]}"
        for page in pages
        for i, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if SECTION_SIGN in line
    ]
    # Then there is none: a reference names the doc or the behaviour, which a reader can open
    assert len(pages) > 100  # tests/ was read
    assert found == []


def test_dispatch_and_the_shared_run_time_cite_no_section_of_the_spec() -> None:
    # Given every module of dispatch and of the shared run time (the call path)
    modules = [
        p
        for root in ("dispatch", "sandbox_runtime")
        for p in sorted((ROOT / "functions" / root).rglob("*.py"))
    ]
    # When looking for a section sign / Then there is none: a comment names the doc or the behaviour
    found = [
        f"{module.relative_to(ROOT)}:{i}: {line.strip()[:120]}"
        for module in modules
        for i, line in enumerate(module.read_text(encoding="utf-8").splitlines(), 1)
        if SECTION_SIGN in line
    ]
    assert len(modules) > 50  # both packages were read
    assert found == []
