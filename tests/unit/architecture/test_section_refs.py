"""The product's source explains itself: it cites no section of a document that is not in the
repository (the section sign and a number); a comment or docstring names the behaviour, or the
doc in docs/ that says it.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCE = ("functions", "layers", "infra", "app.py")
SUFFIXES = {".py", ".txt", ".ts", ".js", ".json", ".toml", ".cfg", ".sh"}
SECTION_SIGN = "\u00a7"
_SKIPPED_DIRS = {"node_modules", "cdk.out", "__pycache__", "dist", "build"}


def citing_sections(root: Path = ROOT) -> list[str]:
    """`path:line` of each source line under SOURCE that holds a section sign."""
    found: list[str] = []
    for top in SOURCE:
        base = root / top
        paths = [base] if base.is_file() else sorted(base.rglob("*")) if base.is_dir() else []
        for path in paths:
            if path.suffix not in SUFFIXES or _SKIPPED_DIRS & set(path.relative_to(root).parts):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            found += [
                f"{path.relative_to(root).as_posix()}:{n}"
                for n, line in enumerate(text.splitlines(), 1)
                if SECTION_SIGN in line
            ]
    return found


def test_no_source_cites_a_section() -> None:
    # Given the product's source, When looking for lines that cite a section, Then there is none
    assert citing_sections() == []


def test_section_check_finds_a_citation(tmp_path: Path) -> None:
    # Given source that cites a section in one module, not in another, and a cache that is not source
    (tmp_path / "infra" / "__pycache__").mkdir(parents=True)
    (tmp_path / "infra" / "a.py").write_text(
        f'"""Caps.\n\nRead as SPEC {SECTION_SIGN}5.2 says."""\n', encoding="utf-8"
    )
    (tmp_path / "infra" / "b.py").write_text(
        '"""Caps, with their per-tenant overrides."""\n', encoding="utf-8"
    )
    (tmp_path / "infra" / "__pycache__" / "a.py").write_text(SECTION_SIGN + "\n", encoding="utf-8")
    # When checked, Then the citing line is found and nothing else
    assert citing_sections(tmp_path) == ["infra/a.py:3"]
