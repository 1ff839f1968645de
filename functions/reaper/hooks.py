"""Other scheduled sweeps plug in here and run on the reaper's 5-minute schedule.

A hook is `fn(now_epoch: float) -> dict` (a small JSON summary for the run's log line). The
module that owns a sweep registers it at import time (`hooks.register("interrupted_calls", fn)`)
and is listed in SWEEP_MODULES, which the reaper imports once per container (`load()`), e.g.
"dispatch.interrupted_sweep" (the reaper ships the dispatch package) or a module of its own
package. One failing hook is logged and reported in the run's summary; it never stops the others
or the reaping.
"""

from __future__ import annotations

from collections.abc import Callable

from sandbox_common import naming as n

Hook = Callable[[float], dict]

# Modules whose import registers a sweep (append yours; the reaper imports them at cold start).
SWEEP_MODULES: tuple[str, ...] = (n.REAPER_JOBS_SWEEP_MODULE,)  # background jobs (issue 13)

_HOOKS: dict[str, Hook] = {}


def load(modules: tuple[str, ...] | None = None) -> None:
    """Import every sweep module (each registers its hook). A module that fails to import fails
    the reaper's cold start loudly: a sweep that silently never runs is worse."""
    import importlib

    for name in SWEEP_MODULES if modules is None else modules:
        importlib.import_module(name)


def register(name: str, hook: Hook) -> None:
    if name in _HOOKS and _HOOKS[name] is not hook:
        raise ValueError(f"a different sweep hook is already registered as {name!r}")
    _HOOKS[name] = hook


def unregister(name: str) -> None:
    _HOOKS.pop(name, None)


def registered() -> dict[str, Hook]:
    return dict(_HOOKS)


def run_all(now: float) -> dict[str, dict]:
    from sandbox_common.observability import logger

    results: dict[str, dict] = {}
    for name, hook in registered().items():
        try:
            results[name] = {"ok": True, **(hook(now) or {})}
        except Exception as exc:  # noqa: BLE001 — one sweep's failure must not stop the others
            logger.exception("sweep_hook_failed", extra={"hook": name})
            results[name] = {"ok": False, "error": type(exc).__name__}
    return results
