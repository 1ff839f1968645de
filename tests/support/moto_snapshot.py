"""Copies of the test moto server's service state, taken once and put back into a reset server.

The suite's moto server (`moto_server` in tests/conftest.py) runs in the test process, so its
backends are Python objects here. The `stack` fixture creates the `local` stage's resources
(~80 AWS calls) for every test; with a snapshot it creates them once per worker, then each test
gets the server reset (as before) and this state copied back: the same tables, parameters,
roles, queue, topic, log groups and buckets, none of the items, objects or messages an earlier
test wrote. `tests/unit/support/test_moto_snapshot.py` holds a restored server to the answers of
freshly created resources.

A copy is a pickle round trip of each backend's attributes. What pickle cannot copy is handled
the way `copy.deepcopy` would: functions (moto keeps lambdas as default factories) are shared,
locks are new (a bound method, like a Condition's `acquire`, binds to the copy of its object),
and a reference to a backend object resolves to the live backend it was taken from. S3 also records
bucket owners outside its backends (`s3_backends.bucket_accounts`), which
is restored with the buckets.
"""

from __future__ import annotations

import io
import pickle
import threading
import types
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from moto.backends import get_backend
from moto.core.base_backend import BaseBackend

_LOCK_TYPES = {type(threading.Lock()): threading.Lock, type(threading.RLock()): threading.RLock}


def _new_defaultdict(cls: type, factory: Any, attrs: dict[str, Any]) -> Any:
    # A defaultdict subclass whose __init__ takes other arguments (moto's ssm ParameterDict):
    # built without calling __init__, like copy.deepcopy builds plain objects.
    obj = defaultdict.__new__(cls)
    obj.default_factory = factory
    obj.__dict__.update(attrs)
    return obj


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, live: dict[int, tuple[str, str, str]]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._live = live
        self.shared: list[Any] = []

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, BaseBackend) and id(obj) in self._live:
            return ("backend", self._live[id(obj)])
        if isinstance(obj, types.FunctionType):
            self.shared.append(obj)
            return ("shared", len(self.shared) - 1)
        lock = _LOCK_TYPES.get(type(obj))
        if lock is not None:
            return ("lock", (lock, id(obj)))  # one new lock per original, however often referenced
        return None

    def reducer_override(self, obj: Any) -> Any:
        # A bound method (e.g. a Condition's `acquire`, its lock's) binds to the copy of its object.
        if isinstance(obj, types.MethodType | types.BuiltinMethodType) and not isinstance(
            obj.__self__, types.ModuleType | type(None)
        ):
            return getattr, (obj.__self__, obj.__name__)
        if isinstance(obj, defaultdict) and type(obj) is not defaultdict:
            return (
                _new_defaultdict,
                (type(obj), obj.default_factory, vars(obj)),
                None,
                None,
                iter(obj.items()),
            )
        return NotImplemented


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, shared: list[Any]) -> None:
        super().__init__(file)
        self._shared = shared
        self._locks: dict[int, Any] = {}

    def persistent_load(self, pid: Any) -> Any:
        kind, value = pid
        if kind == "backend":
            service, account, region = value
            return get_backend(service)[account][region]
        if kind == "shared":
            return self._shared[value]
        lock, original = value
        return self._locks.setdefault(original, lock())


@dataclass(frozen=True)
class MotoSnapshot:
    state: bytes
    shared: list[Any]
    keys: list[tuple[str, str, str]]  # (service, account, region) of each backend copied
    bucket_accounts: dict[str, tuple[str, str]]

    @classmethod
    def take(cls, services: tuple[str, ...]) -> MotoSnapshot:
        backends = {
            (service, account, region): backend
            for service in services
            for account, regions in get_backend(service).items()
            for region, backend in regions.items()
        }
        buffer = io.BytesIO()
        pickler = _Pickler(buffer, {id(b): key for key, b in backends.items()})
        pickler.dump({key: vars(b) for key, b in backends.items()})
        s3 = get_backend("s3")
        return cls(buffer.getvalue(), pickler.shared, list(backends), dict(s3.bucket_accounts))  # type: ignore[attr-defined]

    def restore(self) -> None:
        """Into a freshly reset server: every copied backend gets its snapshot state (a new copy
        each time, so one test's writes never reach the next)."""
        state = _Unpickler(io.BytesIO(self.state), self.shared).load()
        for (service, account, region), attrs in state.items():
            get_backend(service)[account][region].__dict__ = attrs
        get_backend("s3").bucket_accounts.update(self.bucket_accounts)  # type: ignore[attr-defined]
