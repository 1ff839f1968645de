"""The code names a doc cites, and whether each still names something in the repository.

A doc cites code in backticks: a repository path (`infra/local/state.py`, `tests/support/`), a
module (`sandbox_common.naming`), a module's function or class (`dispatch.routes.ROUTES`,
`aws.new_client`), a class's method or field (`SessionRunner.execute`). `cited(text)` finds those
spans, conservatively: a span with spaces, quotes, brackets, arguments or placeholders is prose or
a command, not a name, and is left alone. `Repository(root).problem(name)` says why a cited name
does not resolve (None when it does), reading the code with `ast`, never importing it: importing
the CDK code would start Node, and a doc check starts no process.

How a dotted name resolves:
- its first part is one of our top-level packages (`sandbox_common`, `dispatch`, `infra`, …): the
  longest prefix that is a module of ours, then each further part is a submodule, a name the
  module defines or imports, a class's method, attribute or field (its own or a base's of ours);
- its first part is the last part of modules of ours (`aws.new_client`, `routes.ROUTES`): the rest
  resolves in one of them, or names a method or attribute of a class one of them defines (the doc
  speaking of an instance, `turn.strands_tools()`), or the first part is also a library's module
  (`http.server` beside `tests/support/http.py`);
- its first part is a class of ours (`SessionRunner.execute`): the rest resolves on one of them;
- otherwise, a module Python can find (`os.write`, `boto3.client`) or a lowercase name that is no
  code of ours (`context.invoked_function_arn`: an object in prose) is not checked, and a
  capitalised one that is no class of ours must be listed as another system's name (NOT_OURS).
A name that resolves to something we cannot see into (a function's attribute, another library's
class) is taken as resolved.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

# Roots of our Python code and the prefix each gives its modules (as pyproject's pythonpath and
# the Lambda layout import them).
SOURCE_ROOTS = (
    ("functions", ""),
    ("layers/common/python", ""),
    ("layers/client", ""),
    ("", ""),  # infra, tests, app
)
OWN_TOP_DIRS = ("functions", "infra", "layers", "tests", "docs", "runbooks", ".ci")
SKIPPED_DIRS = {
    ".venv",
    ".venv-session",
    ".venv-egress",
    "node_modules",
    ".git",
    "cdk.out",
    ".build",
    ".local",
}
CHECKED_SUFFIXES = (".py", ".md", ".json", ".txt", ".toml", ".sh", ".Dockerfile", ".jsonl", ".ts", ".js")

# Capitalised dotted names in the docs that are other systems' (AWS error types, CloudFormation
# properties, another SDK's classes), not code of ours.
NOT_OURS = frozenset(
    {
        "Runtime.UnmarshalError",
        "Runtime.ExitError",
        "NetworkConfiguration.VpcConfig",
        "CodeInterpreter.start",
    }
)
# Spans that look like code of ours and are names of another kind: a host name, a protocol's
# namespace or capability, a file inside a session, a JSON field path (of a log line, of the stage
# configuration, whose keys tests/infra checks against the config model).
NOT_CODE = frozenset(
    {
        "egress.sandbox.internal",
        "aws.codeinterpreter.v1",
        "s3.amazonaws.com",
        "tools.listChanged",
        "code.py",
        "caps.tenant_daily",
        "caps.agent_hourly",
        "egress.availability_zone_ids",
    }
)

_SPAN = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_PATH = re.compile(r"[A-Za-z0-9_.*-]+(?:/[A-Za-z0-9_.*-]+)*/?(?:::[A-Za-z_][A-Za-z0-9_]*)?")


@dataclass(frozen=True)
class Cited:
    kind: str  # "path" or "name"
    text: str
    line: int


def cited(text: str) -> list[Cited]:
    """The paths and dotted names `text` cites in backticks, with their line numbers."""
    found: list[Cited] = []
    for number, line in enumerate(text.splitlines(), 1):
        for span in _SPAN.findall(line):
            span = span.strip()
            if span.endswith("()"):
                span = span[:-2]
            if "/" in span:
                if _is_repo_path(span):
                    found.append(Cited("path", span, number))
            elif _DOTTED.fullmatch(span):
                if span.endswith(CHECKED_SUFFIXES):
                    if span.endswith(".py"):  # a file named alone: some file of ours has that name
                        found.append(Cited("path", span, number))
                else:
                    found.append(Cited("name", span, number))
    return found


def _is_repo_path(span: str) -> bool:
    if not _PATH.fullmatch(span) or span.startswith((".", "/", "-")) or "//" in span:
        return False
    first = span.split("/", 1)[0]
    return first in OWN_TOP_DIRS or span.split("::", 1)[0].endswith(CHECKED_SUFFIXES)


@dataclass
class _Module:
    name: str
    path: Path
    is_package: bool

    @cached_property
    def source(self) -> str:
        return self.path.read_text(encoding="utf-8")

    @cached_property
    def tree(self) -> ast.Module:
        return ast.parse(self.source)


@dataclass
class Repository:
    root: Path
    _modules: dict[str, _Module] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        for folder, prefix in SOURCE_ROOTS:
            base = self.root / folder if folder else self.root
            for path in _python_files(base, top_only=not folder):
                parts = list(path.relative_to(base).with_suffix("").parts)
                is_package = parts[-1] == "__init__"
                if is_package:
                    parts = parts[:-1]
                if not parts or any(not p.isidentifier() for p in parts):
                    continue
                name = prefix + ".".join(parts)
                self._modules.setdefault(name, _Module(name, path, is_package))

    # --- what exists ----------------------------------------------------------------------------
    @cached_property
    def tops(self) -> set[str]:
        return {name.split(".", 1)[0] for name in self._modules}

    @cached_property
    def by_last_part(self) -> dict[str, list[_Module]]:
        index: dict[str, list[_Module]] = {}
        for module in self._modules.values():
            index.setdefault(module.name.rsplit(".", 1)[-1], []).append(module)
        return index

    def classes_named(self, name: str) -> list[tuple[_Module, ast.ClassDef]]:
        """The classes of ours called `name`. Only the modules whose source has `class name` are
        parsed: parsing all of them would be most of this check's time."""
        pattern = re.compile(rf"^\s*class {re.escape(name)}\b", re.M)
        return [
            (module, node)
            for module in self._modules.values()
            if pattern.search(module.source)
            for node in ast.walk(module.tree)
            if isinstance(node, ast.ClassDef) and node.name == name
        ]

    @cached_property
    def files(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in _all_files(self.root))

    # --- resolution -----------------------------------------------------------------------------
    def problem(self, cite: Cited) -> str | None:
        """Why `cite` names nothing in the repository, or None when it does."""
        if cite.text in NOT_CODE:
            return None
        if cite.kind == "path":
            return self._path_problem(cite.text)
        return self._name_problem(cite.text)

    def _path_problem(self, text: str) -> str | None:
        path, _, member = text.partition("::")
        path = path.rstrip("/")
        if path.split("/", 1)[0] in OWN_TOP_DIRS:
            matches = [f for f in self.files if fnmatch.fnmatch(f, path) or f.startswith(path + "/")]
        else:  # a path inside some part of ours (`runner/egress.py`) or a file named alone
            matches = [f for f in self.files if f == path or fnmatch.fnmatch(f, "*/" + path)]
        if not matches:
            return "no such file or directory"
        if member and not any(
            self._defines(self._module_at(m), member) for m in matches if m.endswith(".py")
        ):
            return f"{path} defines no {member}"
        return None

    def _module_at(self, relative: str) -> _Module:
        path = self.root / relative
        for module in self._modules.values():
            if module.path == path:
                return module
        return _Module(relative, path, False)

    def _name_problem(self, text: str) -> str | None:
        parts = text.split(".")
        first = parts[0]
        if first in self.tops:
            for cut in range(len(parts), 0, -1):
                module = self._modules.get(".".join(parts[:cut]))
                if module is not None:
                    return None if self._resolves(module, parts[cut:]) else self._unresolved(text)
            return self._unresolved(text)
        if first in self.by_last_part:
            candidates = self.by_last_part[first]
            if any(self._resolves(m, parts[1:]) for m in candidates):
                return None
            if any(self._class_member_in(m, parts[1]) for m in candidates):
                return None  # an instance of a class the module defines
            if _is_library_module(first):
                return None  # `http.server` while tests/support/http.py exists: the library's
            return self._unresolved(text)
        if classes := self.classes_named(first):
            if any(self._in_class(m, c, parts[1:]) for m, c in classes):
                return None
            return self._unresolved(text)
        if first[0].isupper():
            if text in NOT_OURS:
                return None
            return "no class of ours has this name (another system's? list it in NOT_OURS)"
        return None  # a library's module, or an object of prose

    def _unresolved(self, text: str) -> str:
        return f"{text} names nothing in our code"

    def _resolves(self, module: _Module, rest: list[str], depth: int = 0) -> bool:
        if not rest:
            return True
        if depth > 8:
            return True  # a cycle of re-exports: give up, do not fail on it
        head = rest[0]
        sub = self._modules.get(f"{module.name}.{head}")
        if sub is not None and module.is_package:
            return self._resolves(sub, rest[1:], depth + 1)
        node = self._definition(module, head)
        if node is None:
            # a module __getattr__, or the last name defined inside a function of the module
            # (a closure the module hands out: `parts.price_per_call`)
            return self._has_module_getattr(module) or (len(rest) == 1 and _defined_inside(module.tree, head))
        return self._follow(module, node, head, rest[1:], depth)

    def _follow(self, module: _Module, node: ast.AST, name: str, rest: list[str], depth: int) -> bool:
        if not rest:
            return True
        if isinstance(node, ast.ClassDef):
            return self._in_class(module, node, rest)
        if isinstance(node, ast.ImportFrom):
            source = self._import_source(module, node)
            target = self._modules.get(source) if source else None
            if target is None:
                return True  # another library's name
            original = next((a.name for a in node.names if (a.asname or a.name) == name), name)
            sub = self._modules.get(f"{target.name}.{original}")
            if sub is not None:
                return self._resolves(sub, rest, depth + 1)
            return self._resolves(target, [original, *rest], depth + 1)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.asname or alias.name.split(".")[0]) == name:
                    target = self._modules.get(alias.name if alias.asname else name)
                    return True if target is None else self._resolves(target, rest, depth + 1)
        return True  # a function's or a value's attribute: beyond what a reading can see

    def _in_class(
        self, module: _Module, cls: ast.ClassDef, rest: list[str], depth: int = 0, *, lenient: bool = True
    ) -> bool:
        """Whether `rest` names a member of `cls` (its own or a base's). A library's base class
        (Enum, BaseModel, Exception) may hold any name: `lenient` takes it as holding it."""
        if not rest:
            return True
        member = _class_members(cls).get(rest[0])
        if member is not None:
            if isinstance(member, ast.ClassDef):
                return self._in_class(module, member, rest[1:], depth + 1)
            return True
        if depth > 8:
            return True
        external_base = False
        for base in cls.bases:
            found = self._class_named(module, base)
            if found is None:
                external_base = True
            elif self._in_class(*found, rest, depth + 1, lenient=lenient):
                return True
        return lenient and external_base

    def _class_named(
        self, module: _Module, expr: ast.expr, depth: int = 0
    ) -> tuple[_Module, ast.ClassDef] | None:
        """The class of ours a base-class expression of `module` names, or None (a library's)."""
        if not isinstance(expr, ast.Name) or depth > 8:
            return None
        node = self._definition(module, expr.id)
        if isinstance(node, ast.ClassDef):
            return module, node
        if isinstance(node, ast.ImportFrom):
            source = self._import_source(module, node)
            target = self._modules.get(source) if source else None
            if target is not None:
                original = next(a.name for a in node.names if (a.asname or a.name) == expr.id)
                return self._class_named(target, ast.Name(id=original), depth + 1)
        return None

    def _class_member_in(self, module: _Module, name: str) -> bool:
        return any(
            self._in_class(module, node, [name], lenient=False)
            for node in ast.walk(module.tree)
            if isinstance(node, ast.ClassDef)
        )

    def _definition(self, module: _Module, name: str) -> ast.AST | None:
        for node in _top_level(module.tree.body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                return node
            if isinstance(node, ast.Assign) and any(name in _target_names(t) for t in node.targets):
                return node
            if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and name in _target_names(node.target):
                return node
            if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                if self._star_exports(module, node, name):
                    return node  # `from .kinds import *`: followed as an import of `name`
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    bound = alias.asname or (
                        alias.name.split(".")[0] if isinstance(node, ast.Import) else alias.name
                    )
                    if bound == name:
                        return node
        return None

    def _star_exports(self, module: _Module, node: ast.ImportFrom, name: str) -> bool:
        """Whether `from X import *` in `module` binds `name` (a module of ours defining it)."""
        source = self._import_source(module, node)
        target = self._modules.get(source) if source else None
        return target is not None and target is not module and self._definition(target, name) is not None

    def _defines(self, module: _Module, name: str) -> bool:
        return module.path.exists() and self._definition(module, name) is not None

    def _has_module_getattr(self, module: _Module) -> bool:
        return self._definition(module, "__getattr__") is not None

    def _import_source(self, module: _Module, node: ast.ImportFrom) -> str | None:
        if not node.level:
            return node.module
        package = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
        base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
        return ".".join([*base, *([node.module] if node.module else [])])


def _is_library_module(name: str) -> bool:
    """Whether `name` is a top-level module of the standard library or of an installed package.
    Finding a top-level spec runs no module code."""
    if name in sys.stdlib_module_names:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _python_files(base: Path, *, top_only: bool) -> Iterator[Path]:
    if not base.is_dir():
        return
    if top_only:  # the repository root: app.py and the infra/ and tests/ packages
        yield from (p for p in base.glob("*.py"))
        for folder in ("infra", "tests"):
            if (base / folder).is_dir():
                yield from _walk(base / folder, "*.py")
        return
    yield from _walk(base, "*.py")


def _walk(base: Path, pattern: str) -> Iterator[Path]:
    for path in base.rglob(pattern):
        relative = path.relative_to(base).parts
        if not any(part in SKIPPED_DIRS or part == "__pycache__" for part in relative):
            yield path


def _all_files(root: Path) -> Iterator[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and d != "__pycache__"]
        here = Path(folder)
        yield here
        yield from (here / name for name in files)


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """A module's statements, into the bodies of top-level if/try (conditional definitions)."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]):
                yield from _top_level(block)


def _defined_inside(tree: ast.Module, name: str) -> bool:
    return any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name
        for node in ast.walk(tree)
    )


def _target_names(target: ast.expr) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_target_names(t) for t in target.elts)) if target.elts else set()
    return set()


def _class_members(cls: ast.ClassDef) -> dict[str, ast.AST]:
    """A class's methods, nested classes, class-level names and fields, and `self.x` attributes
    its methods set."""
    members: dict[str, ast.AST] = {}
    for node in _top_level(cls.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            members[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                members.update(dict.fromkeys(_target_names(target), node))
        elif isinstance(node, ast.AnnAssign):
            members.update(dict.fromkeys(_target_names(node.target), node))
    for inner in ast.walk(cls):
        if isinstance(inner, (ast.Assign, ast.AnnAssign)):
            targets = inner.targets if isinstance(inner, ast.Assign) else [inner.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    members.setdefault(target.attr, inner)
    return members
