"""A session's disk: one file system, bounded in bytes and in files, holding everything the session
may write — its workspace, its /tmp and its own Python packages — and nothing else.

Kinds (chosen once per server by `probe()`):
- `ext4` (preferred): a sparse image file of `Limits.disk_mb` MiB in the session's directory,
  made with `mkfs.ext4 -N Limits.disk_files`, loop-mounted. A write past either bound fails with
  ENOSPC inside the session; the host gives the session at most the image's size of its own
  disk. Its page cache is charged to the session's memory cgroup like any file's, and is
  reclaimable (written back to the image), so filling the disk does not exhaust memory.
- `tmpfs` (when this host has no loop devices or no mkfs.ext4): a tmpfs with `size=` and
  `nr_inodes=`. Same bounds, but its pages live in RAM: the kernel charges each page to the
  memory cgroup of the process that first writes it, i.e. to the session's own cgroup, so a
  session's files count against its memory limit (a session that fills memory and disk together
  is stopped by its memory limit first).

The file system is mounted by the session's spawn command as root in a mount namespace of the
session's own (`unshare --mount`, propagation private), before bubblewrap starts: the host's mount
table never sees it, and it disappears with the session's last process (the loop device detaches
itself). The server never reads the workspace through the host's paths.

Layout of the mounted disk (bubblewrap binds each part where the session sees it):
- `workspace/` → /workspace (the working directory and HOME, mode 0700)
- `tmp/`       → /tmp
- `python/`    → /opt/session-python: the session's Python, a virtual environment layered over
  the session runtime (`python`, `python3`, `pip` in its bin/, first on PATH). Its interpreter is
  the session runtime's; its site-packages starts empty and writable; a `.pth` file adds the
  runtime's site-packages behind it. So `pip install` — from a command or from code — installs
  into the session's own disk, a later `import` in code or in a command finds it, the runtime's
  pinned packages satisfy dependencies without being copied, and the runtime itself stays
  read-only ("Not uninstalling ... outside environment" when a newer version shadows one).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

SANDBOX_PYTHON_DIR = "/opt/session-python"
KINDS = ("ext4", "tmpfs")
IMAGE_NAME = "disk.img"
MOUNT_NAME = "disk"

_probe_lock = threading.Lock()
_probe_cache: dict[str, str] = {}


def probe(work_dir: str | None = None) -> str:
    """`ext4` when a loop-mounted ext4 image works here (checked once per process), else `tmpfs`."""
    with _probe_lock:
        if "kind" not in _probe_cache:
            _probe_cache["kind"] = "ext4" if _ext4_works(work_dir) else "tmpfs"
        return _probe_cache["kind"]


# The mount tools are looked up where the system keeps them, whatever PATH the server has.
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def _ext4_works(work_dir: str | None) -> bool:
    tools = ("mkfs.ext4", "unshare", "mount")
    if not (all(shutil.which(t, path=SYSTEM_PATH) for t in tools) and os.path.exists("/dev/loop-control")):
        return False
    with tempfile.TemporaryDirectory(prefix="lci-disk-probe-", dir=work_dir) as scratch:
        image, mount = os.path.join(scratch, IMAGE_NAME), os.path.join(scratch, MOUNT_NAME)
        os.mkdir(mount)
        try:
            make_image(image, size_mb=4, files=64, uid=0)
            done = subprocess.run(
                ["unshare", "--mount", "--propagation", "private", "--", "mount", "-o", "loop", image, mount],
                capture_output=True,
                timeout=20,
                env={"PATH": SYSTEM_PATH},
            )
        except (OSError, subprocess.SubprocessError):
            return False
        return done.returncode == 0


def make_image(path: str, *, size_mb: int, files: int, uid: int) -> None:
    """A sparse ext4 image of `size_mb` MiB with room for `files` inodes, its root owned by `uid`."""
    with open(path, "wb") as fh:
        fh.truncate(size_mb << 20)
    subprocess.run(
        [
            "mkfs.ext4",
            "-q",
            "-F",
            "-b",
            "4096",
            "-N",
            str(files),
            "-m",
            "0",  # no blocks reserved for root: the session may fill all of it, and no more
            "-O",
            "^has_journal",  # a scratch disk that dies with its session: nothing to recover
            "-E",
            f"lazy_itable_init=1,root_owner={uid}:{uid}",
            path,
        ],
        check=True,
        capture_output=True,
        timeout=60,
        env={"PATH": SYSTEM_PATH},
    )


# Runs as root in the session's own mount namespace, then becomes bubblewrap (`exec "$@"`).
_MOUNT_SCRIPT = """\
set -e
kind=$1 image=$2 mnt=$3 uid=$4 size_mb=$5 files=$6 template=$7
shift 7
if [ "$kind" = ext4 ]; then
    mount -o loop,nosuid,nodev "$image" "$mnt"
else
    mount -t tmpfs -o "size=${size_mb}m,nr_inodes=${files},mode=0700,uid=${uid},gid=${uid},nosuid,nodev" \\
        lci-session-disk "$mnt"
fi
cp -a "$template/." "$mnt/"
chown -R "$uid:$uid" "$mnt"
exec "$@"
"""


def mount_command(
    *, kind: str, root: str, uid: int, size_mb: int, files: int, template: str, then: list[str]
) -> list[str]:
    """argv that mounts the session's disk under `root` (in a mount namespace of its own), lays it
    out, and then runs `then` (bubblewrap) with it mounted."""
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        _MOUNT_SCRIPT,
        "lci-session-disk",
        kind,
        os.path.join(root, IMAGE_NAME),
        os.path.join(root, MOUNT_NAME),
        str(uid),
        str(size_mb),
        str(files),
        template,
        *then,
    ]


def mounted(root: str, part: str) -> str:
    """Where a part of the disk (workspace, tmp, python) is, in the session's mount namespace."""
    return os.path.join(root, MOUNT_NAME, part)


# --- the session's Python layer ---------------------------------------------------------------
_PROBE = (
    "import json, os, sys, sysconfig; print(json.dumps({"
    "'version': '%d.%d' % sys.version_info[:2], "
    "'purelib': sysconfig.get_path('purelib'), "
    "'base_executable': os.path.realpath(getattr(sys, '_base_executable', None) or sys.executable)}))"
)

_PIP = '#!/bin/sh\nexec "$(dirname "$0")/python" -m pip "$@"\n'


@dataclass(frozen=True)
class RuntimeInfo:
    version: str  # "3.13"
    purelib: str  # the runtime's site-packages
    base_executable: str  # the real interpreter binary


def runtime_info(python: str) -> RuntimeInfo:
    """What the session runtime's interpreter says about itself (run once per server, on the host)."""
    out = subprocess.run([python, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True)
    data = json.loads(out.stdout)
    return RuntimeInfo(data["version"], data["purelib"], data["base_executable"])


def build_template(python: str, directory: str) -> RuntimeInfo:
    """`directory`: what every session's disk starts with (copied in, then owned by the session's
    uid): an empty `workspace/` (0700) and `tmp/` (1777), and the session Python layer `python/`
    (see above). Every path in the layer is absolute into the runtime or relative to itself, so it
    works wherever the disk is mounted."""
    info = runtime_info(python)
    os.chmod(directory, 0o700)
    for name, mode in (("workspace", 0o700), ("tmp", 0o1777)):
        os.mkdir(os.path.join(directory, name))
        os.chmod(os.path.join(directory, name), mode)
    layer = Path(directory, "python")
    site = layer / "lib" / f"python{info.version}" / "site-packages"
    (layer / "bin").mkdir(parents=True)
    site.mkdir(parents=True)
    (layer / "pyvenv.cfg").write_text(
        f"home = {os.path.dirname(info.base_executable)}\ninclude-system-site-packages = false\n"
        f"version = {info.version}\n",
        encoding="utf-8",
    )
    for name in ("python", "python3", f"python{info.version}"):
        (layer / "bin" / name).symlink_to(info.base_executable)
    for name in ("pip", "pip3", f"pip{info.version}"):
        script = layer / "bin" / name
        script.write_text(_PIP, encoding="ascii")
        script.chmod(0o755)
    # An import line (not a bare path): the runtime's own .pth files are processed too.
    (site / "_session_runtime.pth").write_text(
        f"import site; site.addsitedir({info.purelib!r})\n", encoding="utf-8"
    )
    for path in (layer, *layer.rglob("*")):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() or path.parent.name == "bin" else 0o644)
    return info
