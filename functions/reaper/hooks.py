"""Other scheduled sweeps plug in here and run on the reaper's 5-minute schedule.

A hook is `fn(now_epoch: float) -> dict` (a small JSON summary for the run's log line). Register
at import time of the module that owns the sweep, e.g. in the dispatch engineer's
interrupted-call sweep module: `hooks.register("interrupted_calls", sweep_interrupted_calls)`.
One failing hook is logged and counted in the summary; it never stops the others or the reaping.
"""

from __future__ import annotations

from collections.abc import Callable

Hook = Callable[[float], dict]

_HOOKS: dict[str, Hook] = {}


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
