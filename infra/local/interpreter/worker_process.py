"""A session's worker process on the host: started under the isolation plan (its own uid, cgroups
and disk, its network or relays, the worker command of worker_command.py) and ended with
everything it holds given back; how it ended (its exit status, the signal that killed it)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from infra.local.interpreter import cgroups, disk, egress, network, s3relay, worker_command
from infra.local.interpreter.isolation import IsolationPlan, IsolationUnavailable, Limits
from infra.local.interpreter.registry import InterpreterRegistry
from infra.local.interpreter.session import QuotaExceeded, Session
from infra.local.interpreter.uids import NoFreeUid, UidAllocator
from infra.local.interpreter.worker import frames

log = logging.getLogger("local-interpreter")


class WorkerFailure(Exception):
    """The worker could not be started."""


# bubblewrap's set-up of a session's network namespace fails now and then while the kernel is
# busy creating and tearing down many of them ("bwrap: loopback: Failed RTM_NEWADDR: No child
# processes", seen with dozens of sessions starting at once on 2 cores). Such a start is made
# again with a new session, up to this many tries in all; any other start failure is final.
START_TRIES = 3
_TRANSIENT_START_FAILURES = ("bwrap: loopback: Failed RTM_NEWADDR",)


def transient_start_failure(exc: WorkerFailure) -> bool:
    return any(text in str(exc) for text in _TRANSIENT_START_FAILURES)


PIPE_BYTES = 1 << 20  # file tools move megabytes: 16x fewer wake-ups than the 64 KiB default


def _widen_pipe(fd: int) -> None:
    """Best effort (Linux, within /proc/sys/fs/pipe-max-size): a larger pipe buffer."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (AttributeError, OSError):
        pass


@dataclass
class WorkerLauncher:
    """What every worker of one server starts with: the plan, the limits, the session Python and
    its layer (`template`), the uids, the interpreters' data grants, and where VPC sessions reach
    the egress proxy (set by SessionManager.attach_egress; None: no VPC session starts)."""

    plan: IsolationPlan
    limits: Limits
    python: str
    template: str | None
    uids: UidAllocator
    registry: InterpreterRegistry
    egress_proxy: egress.EgressProxy | None = None
    egress_ca: str | None = None

    def spawn(self, session: Session) -> None:
        """Start the session's worker and wait for its hello; on a failure the session is killed
        (everything it holds given back) and WorkerFailure says why."""
        assert self.template is not None  # plan.check() passed: the layer exists
        if self.plan.strategy == "bwrap":
            self._prepare_bwrap(session)
        else:  # unisolated: the session's directories on the host, unbounded
            shutil.copytree(self.template, session.root, symlinks=True, dirs_exist_ok=True)
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        for fd in (req_w, resp_w):
            _widen_pipe(fd)
        info_r, info_w = os.pipe() if self.plan.strategy == "bwrap" else (-1, -1)
        ours = [fd for fd in (req_r, req_w, resp_r, resp_w, info_r, info_w) if fd >= 0]
        grant = self.registry.grant(session.interpreter_id)
        data_env: dict[str, str] = {}
        if grant is not None and grant.statements:
            port = s3relay.SESSION_PORT
            if self.plan.strategy != "bwrap":  # the host's own network: a free port of the host
                session.relay = s3relay.S3Relay(s3relay.listen_here(), grant)
                port = session.relay.port
            data_env = s3relay.session_env(port, grant.region)
        try:
            cmd = worker_command.build_command(
                plan=self.plan,
                network_mode=session.network_mode,
                session_id=session.session_id,
                root=session.root,
                template=self.template,
                req_fd=req_r,
                resp_fd=resp_w,
                limits=self.limits,
                python=self.python,
                uid=session.uid,
                info_fd=info_w if info_w >= 0 else None,
                resolv_conf=self._resolv_conf(session),
                cgroup_procs=session.cgroup.procs_files if session.cgroup else None,
                extra_env=data_env,
                egress_ca=self.egress_ca if session.network_mode == "VPC" else None,
            )
            with open(os.path.join(session.root, "worker.log"), "ab") as log_file:
                session.proc = subprocess.Popen(
                    cmd.argv,
                    cwd=cmd.cwd,
                    env=cmd.env,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=log_file,
                    pass_fds=tuple(fd for fd in (req_r, resp_w, info_w) if fd >= 0),
                    start_new_session=True,
                )
        except IsolationUnavailable:
            for fd in ours:
                os.close(fd)
            raise
        except OSError as exc:
            for fd in ours:
                os.close(fd)
            raise WorkerFailure(f"could not start the interpreter process: {exc}") from exc
        for fd in (req_r, resp_w, info_w):
            if fd >= 0:
                os.close(fd)
        session.req_fd, session.resp_fd = req_w, resp_r
        if info_r >= 0:
            self._attach_network(session, info_r, grant if data_env else None)
        try:
            hello = frames.recv_frame(resp_r, max_json=frames.MAX_JSON)
        except (OSError, ValueError) as exc:
            hello = None
            log.warning("session %s: bad hello: %s", session.session_id, exc)
        if hello is None or hello.obj.get("ready") is not True or hello.raw_length:
            detail = start_failure(session)
            kill(session)
            raise WorkerFailure(f"the interpreter process did not start: {detail}")

    def _prepare_bwrap(self, session: Session) -> None:
        """The session's own uid, cgroups and disk (image and mount point), before it starts."""
        try:
            session.uid_lease = self.uids.lease()
        except NoFreeUid as exc:
            raise QuotaExceeded(str(exc)) from exc
        session.uid = session.uid_lease.uid
        if self.plan.cgroups is not None:
            try:
                session.cgroup = cgroups.SessionCgroup(
                    self.plan.cgroups,
                    f"lci-{session.session_id}",
                    memory_bytes=self.limits.memory_mb << 20,
                    max_tasks=self.limits.max_processes,
                )
            except OSError as exc:
                raise WorkerFailure(f"could not create the session's cgroup: {exc}") from exc
        os.mkdir(os.path.join(session.root, disk.MOUNT_NAME), 0o700)
        if self.plan.disk == "ext4":
            try:
                disk.make_image(
                    os.path.join(session.root, disk.IMAGE_NAME),
                    size_mb=self.limits.disk_mb,
                    files=self.limits.disk_files,
                    uid=session.uid,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                raise WorkerFailure(f"could not make the session's disk: {exc}") from exc

    def _resolv_conf(self, session: Session) -> str | None:
        if self.plan.strategy != "bwrap" or session.network_mode != "PUBLIC":
            return None
        path = os.path.join(session.root, "resolv.conf")
        with open(path, "w", encoding="ascii") as fh:
            fh.write(network.RESOLV_CONF)
        return path

    def _attach_network(self, session: Session, info_r: int, grant: s3relay.DataGrant | None) -> None:
        """Read bwrap's info (the sandbox's host pid); give the session its relay to the tenant's
        data (when its interpreter has a grant) and a PUBLIC session its fenced egress, before the
        worker can be sent any code."""
        try:
            with os.fdopen(info_r, "rb") as info_file:
                raw = info_file.read()
            child_pid = int(json.loads(raw or b"{}")["child-pid"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            detail = start_failure(session)
            kill(session)
            raise WorkerFailure(f"the sandbox did not start: {detail}") from exc
        if grant is not None:
            try:
                session.relay = s3relay.S3Relay(s3relay.listen_in_netns(child_pid), grant)
            except OSError as exc:
                kill(session)
                raise WorkerFailure(f"the session's way to its data could not be set up: {exc}") from exc
        if session.network_mode == "VPC":
            assert self.egress_proxy is not None and session.uid is not None  # start() checked both
            offset = (session.uid - self.uids.base) % egress.SOURCE_ADDRESSES
            try:
                session.egress_relay = egress.EgressRelay(
                    s3relay.listen_in_netns(child_pid, egress.SESSION_PORT),
                    self.egress_proxy,
                    egress.source_address(offset),
                )
            except OSError as exc:
                kill(session)
                raise WorkerFailure(
                    f"the session's way to the egress proxy could not be set up: {exc}"
                ) from exc
            return
        if session.network_mode != "PUBLIC":
            return
        try:
            session.slirp = network.attach_public(child_pid, os.path.join(session.root, "network.log"))
        except (network.NetworkSetupFailed, OSError, subprocess.SubprocessError) as exc:
            kill(session)
            raise WorkerFailure(f"the session's network could not be set up: {exc}") from exc


def killing_signal(session: Session, status: int) -> int | None:
    """The signal that killed the session's process when it was not the OOM killer: SIGKILL
    only when the session's memory cgroup saw no OOM kill (without cgroups it cannot be told
    apart from one, and stays an OOM); any other signal always."""
    if status <= 128:
        return None
    signum = status - 128
    if signum not in {int(s) for s in signal.Signals}:
        return None
    if signum == signal.SIGKILL and (session.cgroup is None or session.cgroup.oom_kills() > 0):
        return None
    return signum


def exit_status(session: Session) -> int:
    """128 + signal for a killed process (137 for SIGKILL, the OOM killer's), else its code."""
    proc = session.proc
    if proc is None:
        return 137
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    code = proc.returncode
    if code is None:
        return 137
    return 128 - code if code < 0 else code


def kill(session: Session) -> None:
    proc = session.proc
    if proc is not None:
        # The whole process group: bwrap (or unshare) and everything it started that did not
        # leave the group; the sandbox itself dies with bwrap (--die-with-parent, pid ns).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    if session.cgroup is not None:  # whatever of the session is still alive, then its cgroups
        session.cgroup.destroy()
    if session.slirp is not None:
        session.slirp.stop()
    s3relay.stop(session.relay)
    session.relay = None
    egress.stop(session.egress_relay)
    session.egress_relay = None
    # Close our pipe ends only once no call is reading them (the process is dead, so a
    # reader sees EOF at once and releases the lock).
    acquired = session.exec_lock.acquire(timeout=10)
    try:
        for attr in ("req_fd", "resp_fd"):
            fd = getattr(session, attr)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(session, attr, -1)
    finally:
        if acquired:
            session.exec_lock.release()
    _cleanup_dirs(session)


def _cleanup_dirs(session: Session) -> None:
    shutil.rmtree(session.root, ignore_errors=True)
    if session.uid_lease is not None:  # its processes are gone: the uid may serve another session
        session.uid_lease.release()


def start_failure(session: Session) -> str:
    """What a session that failed to start left: its log's tail and, if its process ended, the
    exit status. Read before `kill`, which deletes the session's directory with the log."""
    detail = worker_log(session)
    status = session.proc.poll() if session.proc is not None else None
    return detail if status is None else f"{detail} (exit status {status})"


def worker_log(session: Session) -> str:
    try:
        text = Path(session.root, "worker.log").read_text(errors="replace").strip()
    except OSError:
        return "no output"
    return text[-500:] or "no output"
