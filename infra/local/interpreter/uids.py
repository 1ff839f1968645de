"""One unprivileged host uid per live session, unique on this machine.

Several local interpreters may run at once (one per checkout), so uniqueness is machine-wide: a
uid is held by an exclusive `flock` on its file in a root-only lock directory, for as long as the
session lives. The kernel drops the lock when the holder exits, so a crashed server leaks nothing.
A uid that still owns a live process (left over from anything), or still owns kernel keys, is
skipped: a session's keyrings belong to its own user namespace and normally die with it
(isolation.py), but a key can be kept alive after its session — the kernel collects keys
asynchronously, and a key linked into a keyring that something else holds lives as long as that
keyring — and a later session with the same uid could read it by its serial (listed in
/proc/keys). Such a uid is handed out again only once the kernel counts no key of it
(/proc/key-users).

The uid is never root, never a uid that owns files outside a session's workspace (the range lies
far above login uids), and not shared between two live sessions: RLIMIT_NPROC, which counts the
processes of a uid, is then a per-session limit.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import threading
from dataclasses import dataclass

UID_BASE = 610_000
UID_COUNT = 8_192
_LOCK_DIRS = ("/run/sandbox-local-uids", "/tmp/.sandbox-local-uids")


class NoFreeUid(RuntimeError):
    """Every uid of the range is held by a live session."""


@dataclass
class UidLease:
    uid: int
    _fd: int

    def release(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = -1


def _lock_dir() -> str:
    for path in _LOCK_DIRS:
        with contextlib.suppress(OSError):
            os.makedirs(path, mode=0o700, exist_ok=True)
            st = os.lstat(path)
            # Root-owned, not a symlink, nobody else may write: no other user can pre-create locks.
            if st.st_uid == os.geteuid() and (st.st_mode & 0o077) == 0 and not os.path.islink(path):
                return path
    raise NoFreeUid("no private directory for uid locks (/run or /tmp)")


def uids_with_processes() -> set[int]:
    """Real uids of every live process on the host."""
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        found.add(int(line.split()[1]))
                        break
    return found


def uids_with_keys() -> set[int]:
    """Uids that own at least one kernel key (/proc/key-users: `uid: usage nkeys/nikeys ...`)."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        with open("/proc/key-users", encoding="ascii", errors="replace") as fh:
            for line in fh:
                with contextlib.suppress(ValueError, IndexError):
                    uid, rest = line.split(":", 1)
                    if int(rest.split()[1].split("/")[0]) > 0:
                        found.add(int(uid))
    return found


class UidAllocator:
    def __init__(self, base: int = UID_BASE, count: int = UID_COUNT) -> None:
        self.base, self.count = base, count
        self._lock = threading.Lock()

    def lease(self) -> UidLease:
        directory = _lock_dir()
        busy = uids_with_processes() | uids_with_keys()
        start = secrets.randbelow(self.count)  # spread parallel servers over the range
        with self._lock:
            for i in range(self.count):
                uid = self.base + (start + i) % self.count
                if uid in busy:
                    continue
                fd = os.open(os.path.join(directory, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                return UidLease(uid, fd)
        raise NoFreeUid(f"all {self.count} session uids from {self.base} are in use")
