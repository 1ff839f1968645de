"""Whole-session limits with cgroups: memory summed over every process of a session, and a
process (task) count, whatever the session forks.

Supported here: cgroup v1 with the `memory` and `pids` controllers mounted and writable (this
machine: /sys/fs/cgroup/{memory,pids}). Each session gets one child cgroup per controller, under
the server's own cgroup (so a limit on the server still applies to its sessions), created before
the worker starts and entered by the spawn command itself before it executes bubblewrap, so no
process of the session ever runs outside it.

Not supported (yet): a pure cgroup v2 hierarchy. There `detect()` answers None and the session
falls back to per-process RLIMIT_AS plus RLIMIT_NPROC on the session's own uid (see isolation.py:
that bounds the number of processes, but memory only per process).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

V1_ROOT = Path("/sys/fs/cgroup")
_CONTROLLERS = ("memory", "pids")


@dataclass(frozen=True)
class CgroupSupport:
    version: str  # "v1"
    parents: dict[str, Path]  # controller -> directory new session cgroups are created in


def _own_path(controller: str) -> str:
    """This process's cgroup path in a v1 hierarchy (`/` when unknown)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            if controller in names.split(","):
                return path
    return "/"


def detect() -> CgroupSupport | None:
    """The cgroup v1 memory+pids hierarchies, if this process may create cgroups in them."""
    parents: dict[str, Path] = {}
    for controller in _CONTROLLERS:
        mount = V1_ROOT / controller
        if not (mount / "cgroup.procs").exists():
            return None
        parent = mount / _own_path(controller).lstrip("/")
        probe = parent / f"lci-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError:
            return None
        parents[controller] = parent
    if not (parents["memory"] / "memory.limit_in_bytes").exists():
        return None
    return CgroupSupport("v1", parents)


class SessionCgroup:
    """One session's cgroups; `procs_files` are what the spawn command writes its pid into."""

    def __init__(self, support: CgroupSupport, name: str, *, memory_bytes: int, max_tasks: int) -> None:
        self.dirs = {c: p / name for c, p in support.parents.items()}
        created: list[Path] = []
        try:
            for path in self.dirs.values():
                path.mkdir()
                created.append(path)
            memory = self.dirs["memory"]
            (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
            swap = memory / "memory.memsw.limit_in_bytes"  # present only with swap accounting
            if swap.exists():
                swap.write_text(str(memory_bytes))  # memory + swap == memory: no swap at all
            (self.dirs["pids"] / "pids.max").write_text(str(max_tasks))
        except OSError:
            for path in reversed(created):
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise

    @property
    def procs_files(self) -> list[str]:
        return [str(p / "cgroup.procs") for p in self.dirs.values()]

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.dirs.values():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(x) for x in (path / "cgroup.procs").read_text().split())
        return sorted(found)

    def memory_peak_bytes(self) -> int:
        return int((self.dirs["memory"] / "memory.max_usage_in_bytes").read_text())

    def oom_kills(self) -> int:
        """How often the kernel's OOM killer acted in this session (memory.oom_control)."""
        with contextlib.suppress(OSError, ValueError):
            for line in (self.dirs["memory"] / "memory.oom_control").read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        return 0

    def destroy(self, timeout: float = 5.0) -> None:
        """SIGKILL every process still in the session, then remove its cgroups."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            removed = True
            for path in self.dirs.values():
                try:
                    path.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    removed = False
            if removed or time.monotonic() >= deadline:
                return
            time.sleep(0.02)
