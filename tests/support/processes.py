"""Seeing a test start a process.

Every way the standard library starts one ends in a few functions: `subprocess.Popen` in
`_posixsubprocess.fork_exec` (bound into `subprocess` as `_fork_exec`) or `os.posix_spawn[p]`,
`multiprocessing` in `_posixsubprocess.fork_exec` or `os.fork`, `pty` in `os.forkpty`/`os.fork`,
`os.system` in the C library. `install()` wraps each of them so that a start is recorded, then
made as usual: asyncio's subprocesses, jsii's Node (CDK synth), the local stack's Lambda workers
and the local interpreter's sessions all go through one of them.

A start is charged to the test being run (its setup, call or teardown) when it is made by the
thread that runs tests, by a thread the test started, or by a thread a fixture the test uses
started (a local interpreter's server thread, which starts sessions on the test's behalf). A thread
belongs to whatever was running when it, or the thread that started it, was started. So a stack
that another test's fixture left running does not charge its background starts to a unit test
that happens to run next in the same worker.

Used by tests/unit/conftest.py (a unit test that starts a process fails: such tests live under
tests/integration or above) and by tests/support/process_hooks.py, whose `--process-probe=PATH`
lists every test of a run that starts one.
"""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

_OWNER_ATTR = "_tests_process_owner"


@dataclass(frozen=True)
class Start:
    via: str
    what: str


@dataclass(frozen=True)
class _Owner:
    test: str | None = None  # a test's node id
    fixture: object | None = None  # a fixture definition (pytest's FixtureDef)


@dataclass
class _State:
    runner: threading.Thread | None = None  # the thread that runs the tests
    test: str | None = None  # the test being run
    uses: Callable[[object], bool] = lambda _fixture: False  # does that test use this fixture?
    fixtures: list[object] = field(default_factory=list)  # fixtures being set up, innermost last
    starts: dict[str, list[Start]] = field(default_factory=dict)


_state = _State()
_lock = threading.Lock()
_installed = False


def _owner_here() -> _Owner | None:
    """What owns a thread started from the current one."""
    thread = threading.current_thread()
    if thread is not _state.runner:
        owner = getattr(thread, _OWNER_ATTR, None)
        return owner if isinstance(owner, _Owner) else None
    if _state.fixtures:
        return _Owner(fixture=_state.fixtures[-1])
    return _Owner(test=_state.test) if _state.test else None


def _charged_test() -> str | None:
    """The test a start made now, from the current thread, is charged to."""
    test = _state.test
    if test is None:
        return None
    thread = threading.current_thread()
    if thread is _state.runner:
        return test
    owner = getattr(thread, _OWNER_ATTR, None)
    if not isinstance(owner, _Owner):
        return None
    if owner.test == test or (owner.fixture is not None and _state.uses(owner.fixture)):
        return test
    return None


def _describe(args: tuple[Any, ...]) -> str:
    first = args[0] if args else None
    if isinstance(first, (list, tuple)) and first:
        return " ".join(os.fsdecode(a) if isinstance(a, (str, bytes)) else repr(a) for a in first)[:200]
    if isinstance(first, (str, bytes)):
        return os.fsdecode(first)[:200]
    return ""


def _wrap(via: str, original: Callable[..., Any], describe: Callable[[tuple[Any, ...]], str]) -> Any:
    def started(*args: Any, **kwargs: Any) -> Any:
        test = _charged_test()
        if test is not None:
            with _lock:
                _state.starts.setdefault(test, []).append(Start(via, describe(args)))
        return original(*args, **kwargs)

    started.__wrapped__ = original  # type: ignore[attr-defined]
    return started


def install() -> None:
    """Wrap the start points and tag new threads with their owner (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    fork_exec = _posixsubprocess.fork_exec
    wrapped_fork_exec = _wrap("fork_exec", fork_exec, _describe)  # its first argument is the argv
    _posixsubprocess.fork_exec = wrapped_fork_exec
    if getattr(subprocess, "_fork_exec", None) is fork_exec:
        subprocess._fork_exec = wrapped_fork_exec  # type: ignore[attr-defined]
    for name in ("posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            setattr(os, name, _wrap(f"os.{name}", getattr(os, name), _describe))
    for name in ("fork", "forkpty"):
        if hasattr(os, name):
            setattr(os, name, _wrap(f"os.{name}", getattr(os, name), lambda _args: ""))

    start = threading.Thread.start

    def owned_start(self: threading.Thread) -> None:
        setattr(self, _OWNER_ATTR, _owner_here())
        start(self)

    threading.Thread.start = owned_start  # type: ignore[method-assign]


@contextmanager
def running(test: str, uses: Callable[[object], bool]) -> Iterator[None]:
    """Charge the starts made meanwhile to `test` (node id); `uses(fixturedef)` says whether it
    uses a fixture, so that the fixture's threads' starts are charged to it too."""
    install()
    previous = (_state.runner, _state.test, _state.uses)
    _state.runner, _state.test, _state.uses = threading.current_thread(), test, uses
    try:
        yield
    finally:
        _state.runner, _state.test, _state.uses = previous


@contextmanager
def setting_up(fixture: object) -> Iterator[None]:
    """Threads started while `fixture` is set up belong to it (not to the test being set up)."""
    _state.fixtures.append(fixture)
    try:
        yield
    finally:
        _state.fixtures.pop()


def starts_of(test: str) -> list[Start]:
    with _lock:
        return list(_state.starts.get(test, ()))


def all_starts() -> dict[str, list[Start]]:
    with _lock:
        return {test: list(starts) for test, starts in _state.starts.items()}
