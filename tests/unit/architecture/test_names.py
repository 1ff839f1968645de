"""Names are declared once (sandbox_common.naming, by kind) and used by name, never typed again.

- each module of the naming package binds each module-level name once and never changes a bound
  value afterwards (no re-binding, no item assignment, no `.update` / `.append`), and no name is
  bound in two of its modules (the package re-exports them all: one would hide the other);
- callers read names from the package, never from the module that declares them;
- no module of ours spells again, as a string literal, a distinctive name the package declares: an
  action, a table, an index, an environment variable, a metric, an alarm, a key prefix, a
  response status, field or failure reason, a reaper hook. (The session runtime and the client
  distribution are exempt: they run where the common layer is not installed, and each keeps the
  few names it needs checked against these by its own tests.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from sandbox_common import naming as n

ROOT = Path(__file__).resolve().parents[3]
NAMING = ROOT / "layers" / "common" / "python" / "sandbox_common" / "naming"
NAMING_MODULES = sorted(NAMING.glob("*.py"))
SCANNED = (
    ROOT / "functions",
    ROOT / "layers" / "common" / "python" / "sandbox_common",
    ROOT / "infra" / "cdk",
    ROOT / "infra" / "local",
    ROOT / "infra" / "sandboxctl",
)
_DISTINCTIVE_PREFIXES = (
    "ENV_",
    "METRIC_",
    "REAPER_HOOK_",
    "REAPER_",
    "FIELD_",
    "STATUS_",
    "REASON_",
    "OUTPUT_",
    "EVENT_",
    "RETRY_",
)


def distinctive_names() -> dict[str, str]:
    """value -> the name naming.py declares it as."""
    found: dict[str, str] = {}
    for key, value in vars(n).items():
        if key.startswith("_"):
            continue
        if isinstance(value, str) and (key.startswith(_DISTINCTIVE_PREFIXES) or key.endswith("_PREFIX")):
            found[value] = key
        elif isinstance(value, n.Index):
            found[value.name] = f"{key}.name"
        elif isinstance(value, n.TableSpec):
            found[value.logical] = f"{key}.logical"
            found.setdefault(value.pk, f"{key}.pk")
    for enum in (n.Action, n.Alarm):
        found.update({member.value: f"{enum.__name__}.{member.name}" for member in enum})
    # key attribute names shared by many tables (tenant_id, turn_id, ...) are request fields too
    for generic in ("tenant_id", "turn_id", "session_id", "invocation_id", "id", "started_at"):
        found.pop(generic, None)
    return found


def literal_retypes(paths: list[Path], names: dict[str, str], root: Path = ROOT) -> list[str]:
    """`file:line 'value' (NAME)` for every string literal (not a docstring) equal to a name."""
    out = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and node.value in names
            ):
                out.append(f"{path.relative_to(root)}:{node.lineno} {node.value!r} ({names[node.value]})")
    return out


def rebindings(path: Path, bound: set[str] | None = None) -> list[str]:
    """Module-level statements of `path` that bind a name again (in `path`, or one of `bound`, the
    names other modules of its package bound) or change a bound value; adds its names to `bound`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound = set() if bound is None else bound
    out = []
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            targets = [ast.Name(id=node.name)]
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                out.append(f"line {node.lineno}: {func.value.id}.{func.attr}(...) changes a bound value")
        for target in targets:
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            for name in names:
                if isinstance(name, ast.Subscript | ast.Attribute):
                    out.append(f"line {node.lineno}: assigns into {ast.unparse(name)}")
                elif isinstance(name, ast.Name):
                    if name.id in bound or isinstance(node, ast.AugAssign):
                        out.append(f"line {node.lineno}: {name.id} bound again")
                    bound.add(name.id)
    return out


def test_naming_binds_every_name_once() -> None:
    # Given the naming package's modules (each a kind of name)
    assert len(NAMING_MODULES) > 10  # the check below has something to check
    bound: set[str] = set()
    # Then no name is bound twice, in a module or across them, and no bound value changes later
    found = [
        f"{m.name}: {line}"
        for m in NAMING_MODULES
        if m.name != "__init__.py"
        for line in rebindings(m, bound)
    ]
    assert found == []
    # and the package binds nothing of its own: it only re-exports its modules
    init = ast.parse((NAMING / "__init__.py").read_text(encoding="utf-8"))
    assert all(isinstance(s, ast.ImportFrom) or _is_docstring(s) for s in init.body)


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)


def test_naming_binding_check_sees_a_name_bound_in_two_modules(tmp_path: Path) -> None:
    # Given two modules of one package that bind the same name
    (tmp_path / "a.py").write_text("TABLE = 'x'\n")
    (tmp_path / "b.py").write_text("OTHER = 1\nTABLE = 'y'\n")
    bound: set[str] = set()
    # When checked in turn / Then the second binding is reported
    assert rebindings(tmp_path / "a.py", bound) == []
    assert rebindings(tmp_path / "b.py", bound) == ["line 2: TABLE bound again"]


def test_names_are_read_from_the_package_not_its_modules() -> None:
    # Given every module outside the naming package / Then none imports one of its modules
    paths = [p for root in (*SCANNED, ROOT / "tests") for p in root.rglob("*.py") if NAMING not in p.parents]
    submodules = {m.stem for m in NAMING_MODULES}
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sandbox_common.naming."):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            elif (
                isinstance(node, ast.ImportFrom)
                and node.module == "sandbox_common.naming"
                and any(a.name in submodules for a in node.names)
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            elif isinstance(node, ast.Import) and any(
                a.name.startswith("sandbox_common.naming.") for a in node.names
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_naming_rebinding_check_catches_each_kind(tmp_path: Path) -> None:
    # Given a module that re-binds a tuple, assigns into a dict and updates a dict
    module = tmp_path / "names.py"
    module.write_text(
        "TABLES = (1,)\nMETRICS = {}\nTABLES = (*TABLES, 2)\nMETRICS['x'] = 1\nMETRICS.update(y=2)\n"
    )
    # When checked / Then each is reported
    assert rebindings(module) == [
        "line 3: TABLES bound again",
        "line 4: assigns into METRICS['x']",
        "line 5: METRICS.update(...) changes a bound value",
    ]


def test_names_are_not_typed_again_as_literals() -> None:
    # Given every module that may import the common layer, and the names naming.py declares
    paths = [p for root in SCANNED for p in root.rglob("*.py") if NAMING not in p.parents]
    names = distinctive_names()
    assert len(paths) > 100 and len(names) > 100  # the check below has something to check
    # Then none spells such a name again
    assert literal_retypes(paths, names) == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ('query(IndexName="by_tenant")\n', "'by_tenant' (JOBS_BY_TENANT.name)"),
        ('emit("SandboxCapExceeded")\n', "'SandboxCapExceeded' (METRIC_CAP_EXCEEDED)"),
        ('event = {"action": "execute_code"}\n', "'execute_code' (Action.EXECUTE_CODE)"),
    ],
)
def test_names_literal_check_catches_a_retyped_name(tmp_path: Path, source: str, found: str) -> None:
    # Given a module that spells a declared name as a literal (and a docstring that may mention it)
    module = tmp_path / "mod.py"
    module.write_text('"""Reads by_tenant, emits SandboxCapExceeded, answers execute_code."""\n' + source)
    # When checked / Then the literal (not the docstring) is reported
    (reported,) = literal_retypes([module], distinctive_names(), tmp_path)
    assert reported.endswith(found)
