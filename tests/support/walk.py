"""The walk of one call through our modules, traced at run time (sys.setprofile, the calling
thread only: requests sent ahead on the pool are "beside" the walk, not in it).

A stop is a stay in one tracked module: the walk moves to another module when a function of it is
called, or when control returns to it. A return that only passes back through a module on the
way up (the module makes no further call before it returns too) is not a stop: nothing is read
or done there. `returns` counts the stops in a module the walk had already left.

Calls of functions the walk's code does not define (the standard library, botocore, pydantic) are
inside the module that made them — except that a function of a tracked module they call back
(a pydantic validator defined in sandbox_common.models) is a stop of its own.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any


@dataclass
class Walk:
    stops: list[str] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)  # "module:function" -> calls seen

    @property
    def modules(self) -> list[str]:
        return list(dict.fromkeys(self.stops))

    @property
    def returns(self) -> int:
        return len(self.stops) - len(self.modules)

    def figure(self) -> dict[str, Any]:
        return {
            "stops": len(self.stops),
            "modules": len(self.modules),
            "returns": self.returns,
            "walk": " -> ".join(self.stops),
        }

    def by_package(self) -> Walk:
        """The same walk with each module read as its package (`dispatch.sessions.lease` ->
        `dispatch.sessions`, `sandbox_runtime.runner.stream` -> `sandbox_runtime.runner`): a move
        between two modules of one package is no stop."""
        packages = Walk()
        for module in self.stops:
            parts = module.split(".")
            package = ".".join(parts[:2]) if len(parts) > 2 else module
            if not packages.stops or packages.stops[-1] != package:
                packages.stops.append(package)
        return packages


@dataclass
class _Stop:
    module: str
    by_return: bool
    acted: bool = False  # made a call after it was entered


class Tracer:
    def __init__(self, tracked: Callable[[str], bool]) -> None:
        self.tracked = tracked
        self.walk = Walk()
        self._current: _Stop | None = None
        self._thread = threading.get_ident()

    def _module(self, frame: FrameType | None) -> str | None:
        while frame is not None:
            name = frame.f_globals.get("__name__", "")
            if self.tracked(name):
                return name
            frame = frame.f_back
        return None

    def _enter(self, module: str, *, by_return: bool) -> None:
        current = self._current
        if current is not None and current.module == module:
            return
        if current is not None and current.by_return and not current.acted:
            self.walk.stops.pop()  # passed back through on the way up: not a stop
        self._current = _Stop(module, by_return)
        if not self.walk.stops or self.walk.stops[-1] != module:
            self.walk.stops.append(module)

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if threading.get_ident() != self._thread:
            return
        if event == "call":
            if self._current is not None and self._module(frame.f_back) == self._current.module:
                self._current.acted = True
            name = frame.f_globals.get("__name__", "")
            if self.tracked(name):
                key = f"{name}:{frame.f_code.co_name}"
                self.walk.calls[key] = self.walk.calls.get(key, 0) + 1
                self._enter(name, by_return=False)
        elif event == "return":
            back = self._module(frame.f_back)
            if back is not None:
                self._enter(back, by_return=True)


@contextmanager
def traced(tracked: Callable[[str], bool]) -> Iterator[Walk]:
    tracer = Tracer(tracked)
    previous = sys.getprofile()
    sys.setprofile(tracer)
    try:
        yield tracer.walk
    finally:
        sys.setprofile(previous)
    if tracer._current is not None and tracer._current.by_return and not tracer._current.acted:
        tracer.walk.stops.pop()


def in_call_path(module: str) -> bool:
    """The modules a reader follows to understand a call: dispatch's, the shared run time's and
    the request models (where a request is validated)."""
    return module.split(".")[0] in ("dispatch", "sandbox_runtime") or module == "sandbox_common.models"


def in_any_of_ours(module: str) -> bool:
    """Also every module of the common layer (outcome, audit, errors, names, ...)."""
    return in_call_path(module) or module.split(".")[0] == "sandbox_common"
