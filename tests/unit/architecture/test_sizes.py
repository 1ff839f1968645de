"""The product's source stays in small pieces: no module over MAX_MODULE_LINES lines, no function
over MAX_FUNCTION_LINES. A module that grows past the limit is split by what its parts are for; a
function, into the steps it runs.

The product's source is every Python module of functions/, layers/ and infra/, and app.py. A
function's length runs from its first decorator (or its `def`) to its last line, nested functions
and classes included (they are part of it).

EXEMPT names what is over its limit and is being split (a module by its path, a function by `path
name`); it is empty, and it only shrinks: an entry no longer over its limit fails the check.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCE = (ROOT / "functions", ROOT / "layers", ROOT / "infra", ROOT / "app.py")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
_SKIPPED_DIRS = {"node_modules", "cdk.out", "__pycache__"}
EXEMPT: frozenset[str] = frozenset()


def source_modules(roots: tuple[Path, ...] = SOURCE) -> list[Path]:
    modules: list[Path] = []
    for root in roots:
        paths = [root] if root.is_file() else sorted(root.rglob("*.py"))
        modules.extend(p for p in paths if not _SKIPPED_DIRS & set(p.parts))
    return modules


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def sizes(modules: list[Path], root: Path = ROOT) -> dict[str, int]:
    """Lines of each module (`path`) and of each function (`path name`, the longest if a name repeats)."""
    found: dict[str, int] = {}
    for path in modules:
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(root).as_posix()
        found[where] = len(text.splitlines())
        for fn in _functions(ast.parse(text, filename=str(path))):
            start = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
            length = (fn.end_lineno or fn.lineno) - start + 1
            key = f"{where} {fn.name}"
            found[key] = max(found.get(key, 0), length)
    return found


def oversized(modules: list[Path], root: Path = ROOT) -> list[str]:
    """`path: N lines` for each module over the limit, `path name: N lines` for each function."""
    return [
        f"{key}: {lines} lines"
        for key, lines in sizes(modules, root).items()
        if lines > (MAX_FUNCTION_LINES if " " in key else MAX_MODULE_LINES)
    ]


def test_no_module_or_function_of_the_product_is_over_its_limit() -> None:
    # Given every module of the product's source
    modules = source_modules()
    assert len(modules) > 200  # the check below has something to check
    found = oversized(modules)
    # Then none is over the module limit, and none of their functions over the function limit,
    # but for the exempt ones
    assert [f for f in found if f.split(": ")[0] not in EXEMPT] == []
    # And every exempt one is still over its limit (the list only shrinks)
    assert sorted(EXEMPT - {f.split(": ")[0] for f in found}) == []


def test_size_check_catches_a_long_module_and_a_long_function(tmp_path: Path) -> None:
    # Given a module one line over the limit, holding a decorated function one line over its limit
    # (nested in a class, with a nested function of its own) and one exactly at it
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 3))
    long_fn = f"    @staticmethod\n    def long():\n        def inner():\n            pass\n{body}\n"
    fitting = "\n".join(f"    y{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1))
    text = f"class K:\n{long_fn}\n\ndef fits():\n{fitting}\n"
    filler = MAX_MODULE_LINES + 1 - len(text.splitlines())
    module = tmp_path / "pkg" / "big.py"
    module.parent.mkdir()
    module.write_text(text + "\n" * (filler - 1) + "z = 1\n")
    small = tmp_path / "pkg" / "small.py"
    small.write_text("def f():\n    pass\n")
    # When checked (the bytecode cache is not source)
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "big.py").write_text("\n" * 1000)
    found = oversized(source_modules((tmp_path / "pkg",)), tmp_path)
    # Then the module and the long function are reported, and nothing else
    assert found == [
        f"pkg/big.py: {MAX_MODULE_LINES + 1} lines",
        f"pkg/big.py long: {MAX_FUNCTION_LINES + 1} lines",
    ]
