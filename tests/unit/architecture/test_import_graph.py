"""No import cycles anywhere in functions/, layers/ and infra/ (issue 9).

Every module is parsed (never imported) and every import it contains — also the ones inside
functions, which hide cycles from a plain import — is resolved to a project module. A cycle is a
strongly connected component of more than one module (or a module importing itself).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# (directory, module prefix): how Lambda and the CLI import them (the asset roots).
SOURCE_ROOTS = (
    (ROOT / "functions", ""),
    (ROOT / "layers" / "common" / "python", ""),
    (ROOT / "infra", "infra."),
)


def _module_name(path: Path, base: Path, prefix: str) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return prefix + ".".join(parts) if parts else prefix.rstrip(".")


def project_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for base, prefix in SOURCE_ROOTS:
        for path in base.rglob("*.py"):
            if "node_modules" in path.parts or "cdk.out" in path.parts:
                continue
            modules[_module_name(path, base, prefix)] = path
    return modules


def _imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, list[str]]]:
    """(imported module, names imported from it) for every import statement, at any depth."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            yield base, [a.name for a in node.names]


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for target, names in _imports(tree, name, path.name == "__init__.py"):
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
            if submodules:
                graph[name].update(submodules)
            if target in modules and len(submodules) < len(names or [""]):
                graph[name].add(target)  # a name defined in the module (or `import target`)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with a cycle (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    found.append(sorted(component))
    return found


def test_import_graph_finds_a_cycle_hidden_in_a_function(tmp_path: Path) -> None:
    # Given two modules that import each other, one of them only inside a function
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import thing\n")
    (pkg / "b.py").write_text("def thing():\n    from . import a\n    return a\n")
    (pkg / "c.py").write_text("from .a import thing\n")
    modules = {_module_name(p, tmp_path, ""): p for p in pkg.rglob("*.py")}
    # When the graph is built / Then the hidden cycle is found, and nothing else
    assert cycles(import_graph(modules)) == [["pkg.a", "pkg.b"]]


def test_import_graph_of_the_project_has_no_cycle() -> None:
    # Given every module of functions/, layers/ and infra/
    modules = project_modules()
    graph = import_graph(modules)
    # Then the graph is real (the dispatch handler reaches its logic) and acyclic
    assert "dispatch.routes" in graph["dispatch.handler"]
    assert "dispatch.steps" in graph["dispatch.routes"]
    assert len(modules) > 80
    assert cycles(graph) == []
