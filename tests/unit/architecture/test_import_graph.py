"""The import graph of functions/, layers/ and infra/: no cycles, and the parts of the house
import each other only as tests/unit/architecture/parts.py allows.

Every module is parsed (never imported) and every import it contains — also the ones inside
functions, which hide cycles and forbidden edges from a plain import — is resolved to a project
module. A cycle is a strongly connected component of more than one module (or a module importing
itself).
"""

from __future__ import annotations

import ast
import functools
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.architecture import parts as p

ROOT = Path(__file__).resolve().parents[3]
# (directory, module prefix): how Lambda and the CLI import them (the asset roots).
SOURCE_ROOTS = (
    (ROOT / "functions", ""),
    (ROOT / "layers" / "common" / "python", ""),
    (ROOT / "layers" / "client", ""),
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


@functools.cache
def _parsed(text: str, filename: str) -> ast.Module:
    return ast.parse(text, filename=filename)


def _tree(path: Path) -> ast.Module:
    """`path` parsed; each text parsed once per process (the tests below walk every module)."""
    return _parsed(path.read_text(encoding="utf-8"), str(path))


@functools.cache
def _imports(tree: ast.AST, module: str, is_package: bool) -> tuple[tuple[str, list[str]], ...]:
    """(imported module, names imported from it) for every import statement, at any depth; one
    walk per tree (a tree from `_tree` stays cached, so its identity is never reused)."""
    return tuple(_walk_imports(tree, module, is_package))


def _walk_imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, list[str]]]:
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
        tree = _tree(path)
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
    assert "dispatch.line" in graph["dispatch.routes"]
    assert len(modules) > 80
    assert cycles(graph) == []


# --- parts and the edges between them ------------------------------------------------------------
def all_modules() -> dict[str, Path]:
    """The project's modules, the App (app.py) and the tests: everything the parts table covers."""
    modules = project_modules()
    modules["app"] = ROOT / "app.py"
    for path in (ROOT / "tests").rglob("*.py"):
        modules[_module_name(path, ROOT / "tests", "tests.")] = path
    return modules


def part_of(name: str) -> str | None:
    """The part whose prefix is the longest dotted prefix of `name` (None: no part holds it)."""
    best, length = None, -1
    for part, prefixes in p.PARTS.items():
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > length:
                best, length = part, len(prefix)
    return best


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """Every imported name, absolute: `import a.b` -> a.b, `from a import b` -> a.b."""
    for base, names in _imports(tree, module, is_package):
        if not names or names == ["*"]:
            yield base
        else:
            yield from (f"{base}.{n}" if base else n for n in names)


def _holds_code(tree: ast.Module) -> bool:
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return bool(body)


def layering_violations(modules: dict[str, Path]) -> list[str]:
    """One line per import the parts table does not allow, and per module no part holds."""
    problems = []
    for name, path in sorted(modules.items()):
        tree = _tree(path)
        if name in p.CONTAINERS:
            if _holds_code(tree):
                problems.append(f"{name}: a package that only groups rooms holds code")
            continue
        part = part_of(name)
        if part is None:
            problems.append(f"{name}: no part holds this module")
            continue
        for imported in _imported_names(tree, name, path.name == "__init__.py"):
            other = part_of(imported)
            top = imported.split(".")[0]
            if other is None and top in p.CONTAINERS:
                continue  # `import infra`: the container itself
            if other is None:
                allowed = p.THIRD_PARTY_ALLOWED.get(part)
                if allowed is not None and top not in sys.stdlib_module_names and top not in allowed:
                    problems.append(f"{name} ({part}) imports {imported}: third-party, not declared")
            elif part in p.STANDALONE:
                problems.append(f"{name} ({part}) imports {imported}: its modules run standalone")
            elif other != part and other not in p.MAY_IMPORT[part]:
                problems.append(f"{name} ({part}) imports {imported} ({other})")
    return problems


def capability_of(name: str) -> str | None:
    return next((c for c in p.DISPATCH_CAPABILITIES if name == c or name.startswith(c + ".")), None)


def capability_violations(modules: dict[str, Path]) -> list[str]:
    """One line per import from one dispatch capability package into another's modules other than
    its store (they meet on the call's state, dispatch.call, in the lines that nest their stages,
    dispatch.line, and through the stores)."""
    problems = []
    for name, path in sorted(modules.items()):
        own = capability_of(name)
        if own is None:
            continue
        tree = _tree(path)
        for imported in _imported_names(tree, name, path.name == "__init__.py"):
            other = capability_of(imported)
            if other is None or other == own:
                continue
            store = f"{other}.{p.CAPABILITY_STORE}"
            if imported != store and not imported.startswith(store + "."):
                problems.append(f"{name} imports {imported}: another capability's, not its store")
    return problems


def private_name_violations(modules: dict[str, Path]) -> list[str]:
    """One line per `from x import _y` (or `import x._y`) of a private name of another module of
    ours. Dunder names are not private."""
    problems = []
    for name, path in sorted(modules.items()):
        tree = _tree(path)
        for imported in _imported_names(tree, name, path.name == "__init__.py"):
            owner, _, leaf = imported.rpartition(".")
            private = leaf.startswith("_") and not leaf.startswith("__")
            ours = owner in modules or part_of(owner) not in (None, p.TESTS)
            if private and ours and owner != name:
                problems.append(f"{name} imports {imported}: a private name of {owner}")
    return problems


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def defined_private_names(tree: ast.AST) -> frozenset[str]:
    """The private names a module defines: its functions, classes, names and parameters, and the
    attributes it sets (`self._x = ...`, `obj._x = ...`)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return frozenset(n for n in names if _private(n))


def private_attribute_violations(modules: dict[str, Path]) -> list[str]:
    """One line per read of `obj._name` (obj not `self` or `cls`) where `_name` is a private name
    another module of ours defines and this one does not: reaching into another module's object
    (`runner._redact`) instead of a public name on it. A private name no module of ours defines
    (a third-party or standard-library one) is not ours to judge here."""
    defined = {name: defined_private_names(_tree(path)) for name, path in modules.items()}
    owners: dict[str, list[str]] = {}
    for name, privates in sorted(defined.items()):
        for private in privates:
            owners.setdefault(private, []).append(name)
    problems = []
    for name, path in sorted(modules.items()):
        for node in ast.walk(_tree(path)):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr in defined[name] or node.attr not in owners:
                continue
            where = ", ".join(owners[node.attr])
            problems.append(f"{name} reads {ast.unparse(node)}: a private name of {where}")
    return problems


def test_parts_table_allows_none_of_the_nevers() -> None:
    # Given the table / Then no allowed edge is a never, and every part has its row
    assert set(p.MAY_IMPORT) == set(p.PARTS)
    allowed = {(part, other) for part, others in p.MAY_IMPORT.items() for other in others}
    assert p.NEVER and allowed & set(p.NEVER) == set()
    assert all(edge[0] in p.PARTS and edge[1] in p.PARTS for edge in p.NEVER)


def test_parts_table_client_imports_only_what_its_distribution_declares() -> None:
    # Given the client distribution's declared dependencies and extras
    project = tomllib.loads((ROOT / "layers" / "client" / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *sum(project["optional-dependencies"].values(), [])]
    declared = {r.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip() for r in requirements}
    # Then every third-party import the table allows the client comes with one of them, and its
    # only runtime dependency is boto3
    assert set(p.CLIENT_THIRD_PARTY.values()) <= declared
    assert [r.split(">")[0] for r in project["dependencies"]] == ["boto3"]


def test_import_graph_of_the_project_keeps_to_the_parts_table() -> None:
    # Given every module: functions/, layers/, infra/, app.py and the tests
    modules = all_modules()
    # Then each belongs to a part and every import is one the table allows
    assert {part_of(m) for m in modules} >= {
        p.CDK,
        p.DISPATCH,
        p.COMMON,
        p.SESSION_RUNTIME,
        p.CLIENT,
        p.LOCAL,
    }
    assert layering_violations(modules) == []


def test_import_graph_capabilities_meet_only_on_the_call_and_through_stores() -> None:
    # Given every module of the project
    modules = project_modules()
    # Then the capability packages are there and reach each other only through the call's state,
    # the lines and the stores
    assert {capability_of(m) for m in modules} >= set(p.DISPATCH_CAPABILITIES)
    assert capability_violations(modules) == []


def test_import_graph_no_module_imports_another_modules_private_name() -> None:
    # Given the project's modules and the App (the tests may reach into what they test)
    modules = project_modules()
    modules["app"] = ROOT / "app.py"
    # Then none imports a private name of another
    assert private_name_violations(modules) == []


def test_import_graph_no_module_reads_a_private_attribute_of_another_modules_object() -> None:
    # Given the project's modules and the App (the tests may reach into what they test)
    modules = project_modules()
    modules["app"] = ROOT / "app.py"
    # Then none reads `obj._name` where `_name` is another module's private name
    assert private_attribute_violations(modules) == []


def _fake_tree(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return {_module_name(path, tmp_path, ""): path for path in tmp_path.rglob("*.py")}


# (a rule, the file that breaks it (path: source), the violation it must produce)
VIOLATIONS = [
    (
        "local never imports the CLI",
        "infra/local/a.py",
        "def up():\n    from infra.sandboxctl import ops\n",
        "infra.local.a (Local) imports infra.sandboxctl.ops (CLI)",
    ),
    (
        "a Lambda never imports the client",
        "dispatch/a.py",
        "import sandbox_client.turn\n",
        "dispatch.a (Lambda dispatch) imports sandbox_client.turn (Client)",
    ),
    (
        "a Lambda never imports the CLI",
        "quota_check/a.py",
        "from infra.sandboxctl.ops import invoke\n",
        "quota_check.a (Lambda quota_check) imports infra.sandboxctl.ops.invoke (CLI)",
    ),
    (
        "a Lambda never imports the local emulator",
        "backstop/a.py",
        "from infra.local import stack\n",
        "backstop.a (Lambda backstop) imports infra.local.stack (Local)",
    ),
    (
        "a Lambda never imports the CDK",
        "reaper/a.py",
        "def f():\n    from infra.cdk.config import build_config\n",
        "reaper.a (Lambda reaper) imports infra.cdk.config.build_config (CDK)",
    ),
    (
        "a Lambda never imports another Lambda",
        "quota_check/a.py",
        "from dispatch import handler\n",
        "quota_check.a (Lambda quota_check) imports dispatch.handler (Lambda dispatch)",
    ),
    (
        "the reaper never imports dispatch",
        "reaper/a.py",
        "def f():\n    from dispatch.handler import handler\n",
        "reaper.a (Lambda reaper) imports dispatch.handler.handler (Lambda dispatch)",
    ),
    (
        "the shared run time never imports a Lambda",
        "sandbox_runtime/a.py",
        "from dispatch import handler\n",
        "sandbox_runtime.a (Shared run time) imports dispatch.handler (Lambda dispatch)",
    ),
    (
        "common never imports a Lambda",
        "sandbox_common/a.py",
        "from dispatch.handler import handler\n",
        "sandbox_common.a (Common) imports dispatch.handler.handler (Lambda dispatch)",
    ),
    (
        "common never imports the client",
        "sandbox_common/a.py",
        "from sandbox_client import SandboxTurn\n",
        "sandbox_common.a (Common) imports sandbox_client.SandboxTurn (Client)",
    ),
    (
        "common never imports the local emulator",
        "sandbox_common/a.py",
        "import infra.local.stack\n",
        "sandbox_common.a (Common) imports infra.local.stack (Local)",
    ),
    (
        "common never imports the CLI",
        "sandbox_common/a.py",
        "from infra.sandboxctl import main\n",
        "sandbox_common.a (Common) imports infra.sandboxctl.main (CLI)",
    ),
    (
        "the CDK never imports the local emulator",
        "infra/cdk/a.py",
        "from infra.local.resources import x\n",
        "infra.cdk.a (CDK) imports infra.local.resources.x (Local)",
    ),
    (
        "the CDK never imports the CLI",
        "infra/cdk/a.py",
        "from infra.sandboxctl import target\n",
        "infra.cdk.a (CDK) imports infra.sandboxctl.target (CLI)",
    ),
    (
        "the session runtime imports only the standard library",
        "sandbox_session/a.py",
        "import boto3\n",
        "sandbox_session.a (Session runtime) imports boto3: third-party, not declared",
    ),
    (
        "the session runtime imports nothing of ours",
        "sandbox_session/a.py",
        "from sandbox_common import naming\n",
        "sandbox_session.a (Session runtime) imports sandbox_common.naming: its modules run standalone",
    ),
    (
        "session runtime modules run standalone",
        "sandbox_session/a.py",
        "def f():\n    from . import b\n",
        "sandbox_session.a (Session runtime) imports sandbox_session.b: its modules run standalone",
    ),
    (
        "the client imports only boto3 and its extras",
        "sandbox_client/a.py",
        "import pydantic\n",
        "sandbox_client.a (Client) imports pydantic: third-party, not declared",
    ),
    (
        "the client never imports the common layer",
        "sandbox_client/a.py",
        "from sandbox_common.naming import X\n",
        "sandbox_client.a (Client) imports sandbox_common.naming.X (Common)",
    ),
    (
        "nothing but the tests imports the tests",
        "infra/demo/a.py",
        "from tests.support import stack\n",
        "infra.demo.a (Demo) imports tests.support.stack (Tests)",
    ),
    (
        "the egress proxy never imports a Lambda",
        "egress_proxy/a.py",
        "from dispatch.handler import handler\n",
        "egress_proxy.a (Egress) imports dispatch.handler.handler (Lambda dispatch)",
    ),
    (
        "the egress proxy never imports the local stack",
        "egress_proxy/a.py",
        "def f():\n    from infra.local import stack\n",
        "egress_proxy.a (Egress) imports infra.local.stack (Local)",
    ),
    (
        "the egress proxy never imports the CLI",
        "egress_proxy/a.py",
        "import infra.sandboxctl.ops\n",
        "egress_proxy.a (Egress) imports infra.sandboxctl.ops (CLI)",
    ),
    (
        "the egress proxy never imports the client",
        "egress_proxy/a.py",
        "from sandbox_client import turn\n",
        "egress_proxy.a (Egress) imports sandbox_client.turn (Client)",
    ),
    (
        "the egress proxy imports only the third-party packages its requirements pin",
        "egress_proxy/a.py",
        "import requests\n",
        "egress_proxy.a (Egress) imports requests: third-party, not declared",
    ),
    (
        "a Lambda never imports the egress proxy",
        "dispatch/a.py",
        "from egress_proxy import engine\n",
        "dispatch.a (Lambda dispatch) imports egress_proxy.engine (Egress)",
    ),
    (
        "every module belongs to a part",
        "functions_extra/a.py",
        "",
        "functions_extra.a: no part holds this module",
    ),
    (
        "a container holds no code",
        "infra/__init__.py",
        "import os\n",
        "infra: a package that only groups rooms holds code",
    ),
]


@pytest.mark.parametrize(("rule", "path", "source", "violation"), VIOLATIONS, ids=[v[0] for v in VIOLATIONS])
def test_layering_violations_catch_a_broken_rule(
    tmp_path: Path, rule: str, path: str, source: str, violation: str
) -> None:
    # Given a tiny tree: the modules each rule's import names, and one file that breaks the rule
    targets = [
        "infra/sandboxctl/ops.py",
        "infra/sandboxctl/main.py",
        "infra/sandboxctl/target.py",
        "infra/local/stack.py",
        "infra/local/resources.py",
        "infra/cdk/config.py",
        "dispatch/handler.py",
        "sandbox_client/__init__.py",
        "sandbox_client/turn.py",
        "sandbox_common/naming.py",
        "sandbox_session/b.py",
        "tests/support/stack.py",
        "egress_proxy/engine.py",
    ]
    modules = _fake_tree(tmp_path, {**{t: "" for t in targets}, path: source})
    # When the parts table is applied / Then exactly that violation is reported
    assert layering_violations(modules) == [violation], rule


def test_layering_violations_allow_what_the_table_allows(tmp_path: Path) -> None:
    # Given modules that import only along allowed edges, stdlib and declared third-party modules
    modules = _fake_tree(
        tmp_path,
        {
            "infra/__init__.py": '"""Rooms."""\n',
            "infra/sandboxctl/a.py": "from infra.local import stack\nfrom sandbox_client import turn\n",
            "infra/local/stack.py": "from infra.cdk import config\nimport sandbox_common.naming\n",
            "infra/cdk/config.py": "from sandbox_common.naming import X\n",
            "dispatch/a.py": "from sandbox_session import b\nimport aws_lambda_powertools\n",
            "sandbox_common/naming.py": "import re\nfrom sandbox_session.b import MARKER\n",
            "sandbox_session/b.py": "import json, os\n",
            "sandbox_client/turn.py": "import boto3\nfrom botocore import config\nfrom . import contract\n",
            "sandbox_client/contract.py": "import secrets\n",
            "egress_proxy/addon.py": "import mitmproxy.http\nimport boto3\nfrom sandbox_common import n\n",
            "infra/local/egress.py": "from egress_proxy import config\n",
        },
    )
    # Then nothing is reported
    assert layering_violations(modules) == []


# (a rule, the file that breaks it (path: source), the violation it must produce)
DISPATCH_VIOLATIONS = [
    (
        "a capability never imports another's flow",
        capability_violations,
        "dispatch/jobs/a.py",
        "def f():\n    from dispatch.turns.flow import claim\n",
        "dispatch.jobs.a imports dispatch.turns.flow.claim: another capability's, not its store",
    ),
    (
        "a capability never imports another's package",
        capability_violations,
        "dispatch/tools/a.py",
        "from dispatch import sessions\n",
        "dispatch.tools.a imports dispatch.sessions: another capability's, not its store",
    ),
    (
        "no module imports another module's private name",
        private_name_violations,
        "dispatch/tools/a.py",
        "from dispatch.turns.store import _key\n",
        "dispatch.tools.a imports dispatch.turns.store._key: a private name of dispatch.turns.store",
    ),
    (
        "no module reads a private attribute of another module's object",
        private_attribute_violations,
        "dispatch/tools/a.py",
        "from dispatch.turns import store\n\n\ndef f(x):\n    x._own = 1\n    return store._key(), x._own\n",
        "dispatch.tools.a reads store._key: a private name of dispatch.turns.store",
    ),
    (
        "no module imports a private module of another",
        private_name_violations,
        "dispatch/line.py",
        "import sandbox_runtime._hidden\n",
        "dispatch.line imports sandbox_runtime._hidden: a private name of sandbox_runtime",
    ),
]


@pytest.mark.parametrize(
    ("rule", "check", "path", "source", "violation"),
    DISPATCH_VIOLATIONS,
    ids=[v[0] for v in DISPATCH_VIOLATIONS],
)
def test_dispatch_rules_catch_a_broken_rule(
    tmp_path: Path, rule: str, check: Any, path: str, source: str, violation: str
) -> None:
    # Given a tiny tree: allowed meetings (the call's state, another capability's store, its own
    # modules, a dunder name) and one file that breaks the rule
    allowed = {
        "dispatch/__init__.py": "",
        "dispatch/call.py": "",
        "dispatch/turns/__init__.py": "",
        "dispatch/turns/flow.py": "def claim(): pass\n",
        "dispatch/turns/store.py": "def _key(): pass\n",
        "dispatch/sessions/__init__.py": "",
        "dispatch/sessions/flow.py": "from dispatch.turns.store import Turn\nfrom dispatch import call\n",
        "dispatch/jobs/__init__.py": "",
        "dispatch/jobs/flow.py": "from dispatch.turns import store\nfrom dispatch.jobs import b\n",
        "dispatch/jobs/b.py": "from dispatch.turns.store import __doc__\n",
        "dispatch/tools/__init__.py": "",
        "sandbox_runtime/__init__.py": "",
        "sandbox_runtime/_hidden.py": "",
    }
    modules = _fake_tree(tmp_path, {**allowed, path: source})
    # When the rule is checked / Then exactly that violation is reported
    assert check(modules) == [violation], rule


def test_parts_table_egress_imports_only_what_its_requirements_pin() -> None:
    # Given the egress proxy's requirements file (its venv and its container install exactly it)
    text = (ROOT / "functions" / "egress_proxy" / "requirements.txt").read_text()
    pinned = {line.split("==")[0].strip().lower() for line in text.splitlines() if "==" in line}
    # Then every third-party import the table allows the proxy comes with one of them
    assert {d.lower() for d in p.EGRESS_THIRD_PARTY.values()} <= pinned
    assert "mitmproxy" in pinned
