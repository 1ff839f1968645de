"""Other scheduled sweeps plug in here and run on the reaper's 5-minute schedule.

A hook is `fn(now_epoch: float) -> dict` (a small JSON summary for the run's log line). The
module that owns a sweep names its hooks in a module attribute `SWEEP_HOOKS = {name: fn}` and is
listed in SWEEP_MODULES; the reaper's `load()` (once per container) imports each module and
registers its SWEEP_HOOKS, e.g. "reaper.interrupted_sweep". Registration is done by `load()`, not
as a side effect of the import: a module already in `sys.modules` (imported earlier by something
else) still gets its hooks registered. One failing hook is logged and reported in the run's
summary; it never stops the others or the reaping.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sandbox_common import naming as n

Hook = Callable[[float], dict[str, Any]]

# Modules that declare sweeps in SWEEP_HOOKS (append yours; the reaper loads them at cold start).
SWEEP_MODULES: tuple[str, ...] = (
    n.REAPER_JOBS_SWEEP_MODULE,  # background jobs
    n.REAPER_INTERRUPTED_SWEEP_MODULE,  # calls whose dispatch died
    n.REAPER_PAUSED_SWEEP_MODULE,  # paused tool calls nobody resumes
)

_HOOKS: dict[str, Hook] = {}


def load(modules: tuple[str, ...] | None = None) -> None:
    """Import every sweep module and register the hooks it declares (SWEEP_HOOKS). A module that
    fails to import, or declares none, fails the reaper's cold start loudly: a sweep that silently
    never runs is worse."""
    import importlib

    for name in SWEEP_MODULES if modules is None else modules:
        declared = getattr(importlib.import_module(name), "SWEEP_HOOKS", None)
        if not declared:
            raise LookupError(f"sweep module {name!r} declares no SWEEP_HOOKS")
        for hook_name, hook in declared.items():
            register(hook_name, hook)


def register(name: str, hook: Hook) -> None:
    if name in _HOOKS and _HOOKS[name] is not hook:
        raise ValueError(f"a different sweep hook is already registered as {name!r}")
    _HOOKS[name] = hook


def unregister(name: str) -> None:
    _HOOKS.pop(name, None)


def registered() -> dict[str, Hook]:
    return dict(_HOOKS)


def run_all(now: float) -> dict[str, dict[str, Any]]:
    from sandbox_common.observability import logger

    results: dict[str, dict[str, Any]] = {}
    for name, hook in registered().items():
        try:
            results[name] = {"ok": True, **(hook(now) or {})}
        except Exception as exc:  # noqa: BLE001 — one sweep's failure must not stop the others
            logger.exception("sweep_hook_failed", extra={"hook": name})
            results[name] = {"ok": False, "error": type(exc).__name__}
    return results
