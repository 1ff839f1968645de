"""The readiness preamble that installs the in-sandbox stdio redactor (redaction's first layer).

The Code Interpreter cannot import our packages, so `preamble_source()` returns self-contained
Python: the *source files* of `catalogue.py` and `stdio_runtime.py`, embedded as string literals
and executed as private modules. There is no second, hand-written copy of the patterns: what
runs in the sandbox is byte-for-byte the module the host-side layers use.

The preamble is sent as its own `executeCode` call (never concatenated with user code) and
prints exactly one readiness line: READINESS_MARKER + JSON `{"redactor_installed": bool}`. The
session runner calls `check_readiness(stdout)` and refuses the session unless it is true.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from sandbox_session import redactor as stdio_runtime
from sandbox_session.redactor import installed

READINESS_MARKER = "__SANDBOX_READINESS__ "

# Module names the sources are executed under inside the sandbox.
CATALOGUE_MODULE = "_sbx_redaction_catalogue"
RUNTIME_MODULE = "_sbx_stdio_runtime"

_TEMPLATE = """\
def _sbx_install_redactor(catalogue_source, runtime_source, values, marker):
    import json, sys, types

    def load(name, source):
        module = types.ModuleType(name)
        sys.modules[name] = module  # dataclasses look their module up here
        exec(compile(source, "<" + name + ">", "exec"), module.__dict__)
        return module

    state = False
    try:
        catalogue = load({catalogue_module!r}, catalogue_source)
        runtime = load({runtime_module!r}, runtime_source)
        runtime.install(catalogue, values)
        state = runtime.installed()
    except Exception as exc:  # reported through the marker; user code never runs unmitigated
        sys.__stderr__.write("sandbox redactor install failed: %s\\n" % type(exc).__name__)
    print(marker + json.dumps({{"redactor_installed": bool(state)}}))
    sys.stdout.flush()


_sbx_install_redactor({catalogue_source!r}, {runtime_source!r}, {values!r}, {marker!r})
del _sbx_install_redactor
"""


@lru_cache(maxsize=1)
def _sources() -> tuple[str, str]:
    here = Path(__file__).resolve().parent
    return (here / "catalogue.py").read_text(encoding="utf-8"), Path(stdio_runtime.__file__).read_text(
        encoding="utf-8"
    )


def preamble_source(values: Iterable[str] = ()) -> str:
    """Self-contained Python that wraps sys.stdout/sys.stderr and prints the readiness line.

    `values` are exact secrets to redact too (in every encoded form); they travel inside the
    preamble, so only pass values the sandbox may already see.
    """
    catalogue_source, runtime_source = _sources()
    return _TEMPLATE.format(
        catalogue_module=CATALOGUE_MODULE,
        runtime_module=RUNTIME_MODULE,
        catalogue_source=catalogue_source,
        runtime_source=runtime_source,
        values=tuple(v for v in values if v),
        marker=READINESS_MARKER,
    )


def check_readiness(stdout: str) -> bool:
    """True only if the readiness line is present, parses, and every such line says installed."""
    seen = False
    for line in stdout.splitlines():
        if not line.startswith(READINESS_MARKER):
            continue
        try:
            payload = json.loads(line[len(READINESS_MARKER) :])
        except ValueError:
            return False
        if not isinstance(payload, dict) or payload.get("redactor_installed") is not True:
            return False
        seen = True
    return seen


__all__ = ["READINESS_MARKER", "check_readiness", "installed", "preamble_source"]
