"""The reaper's sweep-hook list (other sweeps plug in)."""

from __future__ import annotations

import sys
import types

import pytest
from reaper import hooks


@pytest.fixture(autouse=True)
def _only_this_tests_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry of this test's hooks only: real sweep modules (e.g. reaper.job_sweep) may have
    registered theirs earlier in the same process."""
    monkeypatch.setattr(hooks, "_HOOKS", {})


def test_load_imports_sweep_modules_and_registers_what_they_declare(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a sweep module that declares one hook
    module = types.ModuleType("sweep_fixture_mod")
    calls: list[float] = []
    module.SWEEP_HOOKS = {"fixture": lambda now: calls.append(now) or {"done": 1}}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sweep_fixture_mod", module)
    # When the reaper loads it and all hooks run
    hooks.load(("sweep_fixture_mod",))
    results = hooks.run_all(123.0)
    # Then it ran once with the run's clock and its summary is reported
    assert calls == [123.0]
    assert results == {"fixture": {"ok": True, "done": 1}}


def test_load_registers_a_module_already_imported_before_the_registry_was_reset() -> None:
    """A module imported earlier (its import side effect spent on another registry) still gets
    its hooks registered when the reaper loads it."""
    import importlib

    from sandbox_common import naming as n

    # Given the jobs sweep module is already imported (and the registry is empty)
    importlib.import_module(n.REAPER_JOBS_SWEEP_MODULE)
    assert hooks.registered() == {}
    # When the reaper loads its sweep list
    hooks.load()
    # Then the jobs sweep is registered all the same (beside the interrupted-calls sweep)
    assert list(hooks.registered()) == [n.REAPER_HOOK_JOBS, n.REAPER_HOOK_INTERRUPTED, n.REAPER_HOOK_PAUSED]


def test_load_refuses_a_module_that_declares_no_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sweep_empty_mod", types.ModuleType("sweep_empty_mod"))
    with pytest.raises(LookupError, match="sweep_empty_mod"):
        hooks.load(("sweep_empty_mod",))


def test_load_unknown_module_fails_loudly() -> None:
    with pytest.raises(ModuleNotFoundError):
        hooks.load(("no_such_sweep_module_xyz",))


def test_register_refuses_a_second_hook_under_the_same_name() -> None:
    def first(now: float) -> dict:
        return {}

    hooks.register("dup", first)
    try:
        with pytest.raises(ValueError):
            hooks.register("dup", lambda now: {})
        hooks.register("dup", first)  # the same one again is fine (module re-import)
    finally:
        hooks.unregister("dup")


def test_run_all_survives_a_failing_hook_and_reports_it() -> None:
    seen: list[float] = []

    def good(now: float) -> dict:
        seen.append(now)
        return {"ended": 2}

    def bad(now: float) -> dict:
        raise RuntimeError("boom")

    hooks.register("good", good)
    hooks.register("bad", bad)
    try:
        results = hooks.run_all(5.0)
    finally:
        hooks.unregister("good")
        hooks.unregister("bad")
    assert seen == [5.0]
    assert results == {"good": {"ok": True, "ended": 2}, "bad": {"ok": False, "error": "RuntimeError"}}


def test_sweep_modules_register_the_background_jobs_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    from sandbox_common import naming as n

    # Given a cold container (the sweep module not imported yet)
    monkeypatch.delitem(sys.modules, n.REAPER_JOBS_SWEEP_MODULE, raising=False)
    # When the reaper loads its sweep list as at cold start
    hooks.load()
    # Then the background-jobs sweep registered itself under its name
    hook = hooks.registered()[n.REAPER_HOOK_JOBS]
    assert hook.__module__ == n.REAPER_JOBS_SWEEP_MODULE
    assert hook.__name__ == "end_due_jobs"


def test_sweep_paused_action_is_parsed_and_named_once() -> None:
    """The reaper's paused-calls hook sends naming.Action.SWEEP_PAUSED_CALLS; dispatch parses exactly that
    (its model's Literal), and the agent-facing action list does not advertise it."""
    import typing

    from sandbox_common import naming as n
    from sandbox_common.errors import SandboxInvalidRequest
    from sandbox_common.models import DISPATCH_ACTIONS, SweepPausedCallsRequest, parse_dispatch_event

    assert typing.get_args(SweepPausedCallsRequest.model_fields["action"].annotation) == (
        n.Action.SWEEP_PAUSED_CALLS,
    )
    assert isinstance(parse_dispatch_event({"action": n.Action.SWEEP_PAUSED_CALLS}), SweepPausedCallsRequest)
    assert n.Action.SWEEP_PAUSED_CALLS not in DISPATCH_ACTIONS
    with pytest.raises(SandboxInvalidRequest):  # nothing else rides along
        parse_dispatch_event({"action": n.Action.SWEEP_PAUSED_CALLS, "tenant_id": "acme"})
