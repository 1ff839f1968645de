"""Interpreters, sessions and their worker processes (no HTTP here).

Lifecycle, as AgentCore documents it:
- a session is READY from Start until Stop, until `sessionTimeoutSeconds` after its creation
  ("time-to-live ... regardless of ongoing activity", botocore model doc of
  StartCodeInterpreterSessionRequest.sessionTimeoutSeconds; default 900), or until its process
  dies (OOM, CPU limit);
- then it is TERMINATED: "Once stopped, a session cannot be restarted" (StopCodeInterpreterSession
  doc). Get still describes it with status TERMINATED (the model's enum is READY|TERMINATED;
  boto/boto3#4701 confirms those are the values the API returns, and strands-agents/tools checks
  `status == "READY"` before reusing a session); Invoke and Stop answer ResourceNotFoundException.
- a session id is only ever found under the interpreter that created it; under any other
  interpreter it does not exist (same error as an unknown id, so existence does not leak).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sandbox_common import naming

from infra.local.interpreter import cgroups, disk, egress, isolation, network, s3relay, worker_command
from infra.local.interpreter.isolation import IsolationUnavailable, Limits
from infra.local.interpreter.uids import NoFreeUid, UidAllocator, UidLease
from infra.local.interpreter.worker import frames

log = logging.getLogger("local-interpreter")

NETWORK_MODES = ("PUBLIC", "SANDBOX", "VPC")
# AgentCore's system interpreter, the official SDK's default identifier: built into every local
# interpreter as a PUBLIC one (docs/decisions.md). It is no tenant's interpreter: the local stack
# registers each tenant's own, and nothing may register this name.
DEFAULT_INTERPRETER_ID = "aws.codeinterpreter.v1"
BUILTIN_INTERPRETERS = {DEFAULT_INTERPRETER_ID: "PUBLIC"}
READY, TERMINATED = "READY", "TERMINATED"
DEFAULT_SESSION_TIMEOUT = 900
MAX_SESSION_TIMEOUT = 28_800
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_TOMBSTONES = 2_000  # terminated sessions remembered for Get


class NotFound(Exception):
    """Unknown interpreter, or a session that does not exist (for this interpreter) or is over."""


class QuotaExceeded(Exception):
    pass


class WorkerFailure(Exception):
    """The worker could not be started."""


# bubblewrap's set-up of a session's network namespace fails now and then while the kernel is
# busy creating and tearing down many of them ("bwrap: loopback: Failed RTM_NEWADDR: No child
# processes", seen with dozens of sessions starting at once on 2 cores). Such a start is made
# again with a new session, up to this many tries in all; any other start failure is final.
_START_TRIES = 3
_TRANSIENT_START_FAILURES = ("bwrap: loopback: Failed RTM_NEWADDR",)


def _transient_start_failure(exc: WorkerFailure) -> bool:
    return any(text in str(exc) for text in _TRANSIENT_START_FAILURES)


def new_session_id() -> str:
    """A ULID (26 Crockford base-32 chars), the shape AgentCore session ids have."""
    value = (int(time.time() * 1000) << 80) | secrets.randbits(80)
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Session:
    session_id: str
    interpreter_id: str
    network_mode: str
    name: str | None
    timeout_seconds: int
    created_at: datetime
    expires_at: float  # time.monotonic()
    root: str
    status: str = READY
    last_updated_at: datetime = field(default_factory=utc_now)
    proc: subprocess.Popen[bytes] | None = None
    req_fd: int = -1
    resp_fd: int = -1
    termination: str | None = None  # stopped | expired | died | shutdown
    uid: int | None = None  # the session's own host uid (bwrap)
    uid_lease: UidLease | None = None
    cgroup: cgroups.SessionCgroup | None = None
    slirp: network.Slirp | None = None
    relay: s3relay.S3Relay | None = None  # the tenant's data, scoped like its role
    egress_relay: egress.EgressRelay | None = None  # VPC: its one way out, to the egress proxy
    exec_lock: threading.Lock = field(default_factory=threading.Lock)
    seq: int = 0  # the last request's sequence number: its answer must carry it back

    def describe(self) -> dict[str, Any]:
        return {
            "codeInterpreterIdentifier": self.interpreter_id,
            "sessionId": self.session_id,
            "name": self.name,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.last_updated_at,
            "sessionTimeoutSeconds": self.timeout_seconds,
            "status": self.status,
        }


@dataclass
class InvokeOutcome:
    """What one tool call produced; `died` means the worker process ended during the call."""

    stdout: str
    stderr: str
    exit_code: int | None
    execution_time: float  # seconds
    content: list[dict[str, Any]] | None = None
    content_blocks: list[bytes] | None = None  # file tools: each content block as the worker encoded it
    is_error: bool | None = None
    died: bool = False
    stdout_bytes: int | None = None  # exact bytes the code wrote, also beyond what was kept
    stderr_bytes: int | None = None
    task_id: str | None = None  # startCommandExecution / getTask / stopTask
    task_status: str | None = None
    streamed: bool = False  # the content blocks were streamed to the caller (`on_blocks`)
    raw_length: int = 0  # the answer's raw part, in bytes (file tools: their content blocks)


# Answers whose raw part is output: stdout and stderr blocks, each within what the worker keeps.
OUTPUT_OPS = ("executeCode", "executeCommand", "startCommandExecution", "getTask", "stopTask")
# Answers whose raw part is content blocks (one per file or entry): streamed when large.
BLOCK_OPS = ("readFiles", "listFiles")
SMALL_RAW = 64 * 1024  # a file tool's blocks up to this size are read whole and sent as one event
_LIST_BLOCK = 64 * 1024  # one listFiles entry (its name is at most 255 bytes)
TASK_STATUSES = ("submitted", "working", "completed", "canceled", "failed")


class ProtocolViolation(Exception):
    """The worker's answer broke the protocol or its bounds; the session has been ended."""


class ClientGone(Exception):
    """The caller went away while file contents were streamed to it."""


Blocks = list[bytes]
BlockSink = Callable[[InvokeOutcome, "frames.Frame"], None]


PIPE_BYTES = 1 << 20  # file tools move megabytes: 16x fewer wake-ups than the 64 KiB default


def _widen_pipe(fd: int) -> None:
    """Best effort (Linux, within /proc/sys/fs/pipe-max-size): a larger pipe buffer."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (AttributeError, OSError):
        pass


class SessionManager:
    def __init__(
        self,
        *,
        interpreters: dict[str, str] | None = None,
        registry_file: str | os.PathLike[str] | None = None,
        limits: Limits | None = None,
        isolation_strategy: str = "auto",
        allow_unisolated: bool | None = None,
        python: str | None = None,
        max_sessions: int = 64,
        base_dir: str | None = None,
        reap_interval: float = 0.2,
        disk_kind: str = "auto",
        uids: UidAllocator | None = None,
        data_grants: dict[str, s3relay.DataGrant] | None = None,
        egress_proxy: egress.EgressProxy | None = None,
    ) -> None:
        self.limits = limits or Limits()
        if allow_unisolated is None:  # the operator's explicit escape hatch (SPEC §18)
            allow_unisolated = os.environ.get(naming.ENV_LOCAL_UNISOLATED) == "1"
        self.plan = isolation.probe(
            isolation_strategy, allow_unisolated=allow_unisolated, disk_kind=disk_kind
        )
        self.isolation = self.plan.strategy
        self.python = python or isolation.default_python()
        # The Python layer every session's disk starts with (disk.py), built once per server.
        self.template: str | None = None
        if self.plan.strategy != "unavailable":
            self.template = tempfile.mkdtemp(prefix="lci-template-", dir=base_dir)
            try:
                disk.build_template(self.python, self.template)
            except (OSError, ValueError, subprocess.SubprocessError) as exc:
                shutil.rmtree(self.template, ignore_errors=True)
                raise IsolationUnavailable(
                    f"{naming.REASON_ISOLATION_UNAVAILABLE}: the session Python {self.python} does not"
                    f" run: {exc}"
                ) from exc
        self._uids = uids or UidAllocator()
        self.max_sessions = max_sessions
        self.base_dir = base_dir
        self._lock = threading.RLock()
        # VPC sessions reach the egress proxy, and only it (egress.py); without one they are refused.
        self.egress_proxy: egress.EgressProxy | None = None
        self._egress_ca: str | None = None
        if egress_proxy is not None:
            self.attach_egress(egress_proxy)
        self._interpreters: dict[str, str] = {}
        # interpreter id -> what its sessions may read of the emulated S3 (s3relay.py)
        self._grants: dict[str, s3relay.DataGrant] = dict(data_grants or {})
        self._sessions: dict[str, Session] = {}
        self._tombstones: OrderedDict[str, Session] = OrderedDict()
        self._client_tokens: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._registry_file = Path(registry_file) if registry_file else None
        self._registry_mtime: float | None = None
        self._file_interpreters: dict[str, str] = {}
        for interpreter_id, mode in (interpreters or {}).items():
            self.register_interpreter(interpreter_id, mode)
        self._load_registry(strict=True)
        # Workers are spawned from this one long-lived thread: bwrap's --die-with-parent (and any
        # PR_SET_PDEATHSIG) fires when the *thread* that forked it exits, and HTTP handler
        # threads exit with their connection.
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lci-spawner")
        self._stop = threading.Event()
        self._reap_interval = reap_interval
        self._reaper = threading.Thread(target=self._reap_loop, name="lci-reaper", daemon=True)
        self._reaper.start()

    def attach_egress(self, proxy: egress.EgressProxy) -> None:
        """Where VPC sessions started from now on reach the egress proxy (and its CA certificate);
        a session already running keeps the relay it was given."""
        ca = None
        if self.plan.strategy == "bwrap":
            ca = egress.install_ca_cert(proxy, tempfile.mkdtemp(prefix="lci-egress-", dir=self.base_dir))
        with self._lock:
            # a running session's bind mount keeps the file it was given, deleted or not
            previous, self.egress_proxy, self._egress_ca = self._egress_ca, proxy, ca
        if previous is not None:
            shutil.rmtree(os.path.dirname(previous), ignore_errors=True)

    # --- interpreters ---------------------------------------------------------------------------
    def register_interpreter(
        self, interpreter_id: str, network_mode: str, data: s3relay.DataGrant | None = None
    ) -> None:
        """`data`: what its sessions may read of the emulated S3 (s3relay.py)."""
        if network_mode not in NETWORK_MODES:
            raise ValueError(f"network_mode must be one of {NETWORK_MODES}, got {network_mode!r}")
        if not interpreter_id or "/" in interpreter_id:
            raise ValueError(f"invalid interpreter id {interpreter_id!r}")
        if interpreter_id in BUILTIN_INTERPRETERS:
            raise ValueError(f"{interpreter_id} is built in (a PUBLIC interpreter of no tenant)")
        with self._lock:
            self._interpreters[interpreter_id] = network_mode
            if data is not None:
                self._grants[interpreter_id] = data

    def interpreters(self) -> dict[str, str]:
        self._load_registry()
        with self._lock:
            return {**self._file_interpreters, **self._interpreters, **BUILTIN_INTERPRETERS}

    def _load_registry(self, strict: bool = False) -> None:
        """The registry file ({"<interpreter id>": "PUBLIC"|"SANDBOX", ...}) is re-read when it
        changes, so the local stack can add interpreters without restarting the server.

        A bad file fails the server's start (strict); a bad *change* is logged and the last good
        registry stays in force, so a half-written file never turns every request into a 500.
        """
        if self._registry_file is None:
            return
        try:
            mtime: float | None = self._registry_file.stat().st_mtime
        except FileNotFoundError:
            mtime = None
        if mtime == self._registry_mtime:
            return
        loaded: dict[str, str] = {}
        try:
            if mtime is not None:
                data = json.loads(self._registry_file.read_text(encoding="utf-8") or "{}")
                if not isinstance(data, dict):
                    raise ValueError(f"{self._registry_file}: expected a JSON object of id -> network mode")
                for interpreter_id, mode in data.items():
                    if mode not in NETWORK_MODES:
                        raise ValueError(
                            f"{self._registry_file}: {interpreter_id!r} has network mode {mode!r}"
                        )
                    loaded[str(interpreter_id)] = mode
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            if strict:
                raise
            log.error("registry %s ignored, keeping the previous one: %s", self._registry_file, exc)
            with self._lock:
                self._registry_mtime = mtime
            return
        with self._lock:
            self._file_interpreters, self._registry_mtime = loaded, mtime

    def resolve_interpreter(self, identifier: str) -> tuple[str, str]:
        """(interpreter id, network mode); an ARN ending in `/<id>` names the same interpreter."""
        known = self.interpreters()
        candidate = identifier.rsplit("/", 1)[-1] if identifier.startswith("arn:") else identifier
        if candidate not in known:
            raise NotFound(f"Code interpreter {identifier} not found")
        return candidate, known[candidate]

    # --- sessions -------------------------------------------------------------------------------
    def start(
        self, identifier: str, *, name: str | None, timeout_seconds: int | None, client_token: str | None
    ) -> Session:
        interpreter_id, mode = self.resolve_interpreter(identifier)
        self.plan.check(mode)  # isolated or refused: nothing is created for a refused session
        if mode == "VPC" and self._egress_ca is None:
            raise IsolationUnavailable(
                f"{naming.REASON_ISOLATION_UNAVAILABLE}: VPC sessions need the egress proxy; start the"
                " local interpreter with --egress-proxy HOST:PORT --egress-ca-cert PATH (sandboxctl local up"
                " does)"
            )
        with self._lock:
            if client_token and (interpreter_id, client_token) in self._client_tokens:
                previous = self._client_tokens[(interpreter_id, client_token)]
                earlier = self._sessions.get(previous) or self._tombstones.get(previous)
                if earlier is not None:
                    return earlier
        timeout = timeout_seconds or DEFAULT_SESSION_TIMEOUT
        for attempt in range(1, _START_TRIES + 1):
            try:
                session = self._start_one(interpreter_id, mode, name, timeout)
                break
            except WorkerFailure as exc:
                if attempt == _START_TRIES or not _transient_start_failure(exc):
                    raise
                log.warning("session start failed: %s; starting a new one", exc)
        session_id = session.session_id
        with self._lock:
            if client_token:
                self._client_tokens[(interpreter_id, client_token)] = session_id
                while len(self._client_tokens) > _TOMBSTONES:
                    self._client_tokens.popitem(last=False)
        if self.plan.strategy == "unisolated":
            log.warning(
                "session %s started UNISOLATED (%s=1): its code runs as the server's user with the "
                "host's file system and network",
                session_id,
                naming.ENV_LOCAL_UNISOLATED,
            )
        log.info("session %s started on %s (%s, %s)", session_id, interpreter_id, mode, self.isolation)
        return session

    def _start_one(self, interpreter_id: str, mode: str, name: str | None, timeout: int) -> Session:
        """A new session, counted against max_sessions while it starts; on a failed start,
        removed with its process, cgroups, network helper, directory and uid."""
        with self._lock:
            if len(self._sessions) >= self.max_sessions:
                raise QuotaExceeded(f"Maximum number of active sessions ({self.max_sessions}) reached")
            session_id = new_session_id()
            session = Session(
                session_id=session_id,
                interpreter_id=interpreter_id,
                network_mode=mode,
                name=name,
                timeout_seconds=timeout,
                created_at=utc_now(),
                expires_at=time.monotonic() + timeout,
                root=tempfile.mkdtemp(prefix=f"lci-{session_id}-", dir=self.base_dir),
            )
            self._sessions[session_id] = session
        try:
            self._spawner.submit(self._spawn, session).result()
        except BaseException:
            with self._lock:
                self._sessions.pop(session_id, None)
            self._kill(session)
            raise
        return session

    def _spawn(self, session: Session) -> None:
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
        with self._lock:
            grant = self._grants.get(session.interpreter_id)
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
                egress_ca=self._egress_ca if session.network_mode == "VPC" else None,
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
            detail = self._start_failure(session)
            self._kill(session)
            raise WorkerFailure(f"the interpreter process did not start: {detail}")

    # --- isolation of one session (bwrap) --------------------------------------------------------
    def _prepare_bwrap(self, session: Session) -> None:
        """The session's own uid, cgroups and disk (image and mount point), before it starts."""
        try:
            session.uid_lease = self._uids.lease()
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
            detail = self._start_failure(session)
            self._kill(session)
            raise WorkerFailure(f"the sandbox did not start: {detail}") from exc
        if grant is not None:
            try:
                session.relay = s3relay.S3Relay(s3relay.listen_in_netns(child_pid), grant)
            except OSError as exc:
                self._kill(session)
                raise WorkerFailure(f"the session's way to its data could not be set up: {exc}") from exc
        if session.network_mode == "VPC":
            assert self.egress_proxy is not None and session.uid is not None  # start() checked both
            offset = (session.uid - self._uids.base) % egress.SOURCE_ADDRESSES
            try:
                session.egress_relay = egress.EgressRelay(
                    s3relay.listen_in_netns(child_pid, egress.SESSION_PORT),
                    self.egress_proxy,
                    egress.source_address(offset),
                )
            except OSError as exc:
                self._kill(session)
                raise WorkerFailure(
                    f"the session's way to the egress proxy could not be set up: {exc}"
                ) from exc
            return
        if session.network_mode != "PUBLIC":
            return
        try:
            session.slirp = network.attach_public(child_pid, os.path.join(session.root, "network.log"))
        except (network.NetworkSetupFailed, OSError, subprocess.SubprocessError) as exc:
            self._kill(session)
            raise WorkerFailure(f"the session's network could not be set up: {exc}") from exc

    def lookup(self, session_id: str) -> Session | None:
        """A session by id, live or terminated, whatever its interpreter (no API uses this)."""
        with self._lock:
            return self._sessions.get(session_id) or self._tombstones.get(session_id)

    def get(self, identifier: str, session_id: str) -> Session:
        interpreter_id, _ = self.resolve_interpreter(identifier)
        with self._lock:
            session = self._sessions.get(session_id) or self._tombstones.get(session_id)
        if session is None or session.interpreter_id != interpreter_id:
            raise NotFound(f"Session {session_id} not found")
        return session

    def active(self, identifier: str, session_id: str) -> Session:
        session = self.get(identifier, session_id)
        if session.status != READY:
            raise NotFound(f"Session {session_id} not found")
        return session

    def list(self, identifier: str, status: str | None = None) -> list[Session]:
        interpreter_id, _ = self.resolve_interpreter(identifier)
        with self._lock:
            every = list(self._sessions.values()) + list(self._tombstones.values())
        found = [
            s for s in every if s.interpreter_id == interpreter_id and (status is None or s.status == status)
        ]
        return sorted(found, key=lambda s: s.created_at, reverse=True)

    def stop(self, identifier: str, session_id: str) -> Session:
        session = self.active(identifier, session_id)
        self.terminate(session, "stopped")
        return session

    def invoke(
        self, session: Session, op: str, arguments: dict[str, Any], on_blocks: BlockSink | None = None
    ) -> InvokeOutcome:
        """Run one tool call; calls on one session are serialized, as a kernel runs one cell at a time.

        The answer is read under bounds before anything is buffered (frames.recv_frame): its JSON
        part is small, output blocks are at most what the worker keeps per stream, a file tool's
        blocks are each at most one file's encoding; it must answer this request (its `seq`). A
        file tool's blocks over SMALL_RAW are not buffered at all: `on_blocks(outcome, frame)`
        streams them on to the caller, block by block, while the session is held. An answer that
        breaks the protocol ends the session (it is not trusted again) and the call answers
        ProtocolViolation's outcome."""
        violation: str | None = None
        outcome: InvokeOutcome | None = None
        gone = False
        with session.exec_lock:
            if session.status != READY:
                raise NotFound(f"Session {session.session_id} not found")
            session.seq += 1
            try:
                frames.send_frame(session.req_fd, {"op": op, "arguments": arguments, "seq": session.seq})
                frame = frames.recv_frame(session.resp_fd, max_json=frames.MAX_JSON)
                if frame is not None:
                    outcome = self._answer(op, frame, session.seq)
                    if outcome.content_blocks is None and op in BLOCK_OPS:
                        if frame.raw_length <= SMALL_RAW:
                            outcome.content_blocks = self._small_blocks(op, frame)
                        elif on_blocks is not None:
                            try:
                                on_blocks(outcome, frame)
                            except ClientGone:
                                gone = True
                            outcome.streamed = True
                        frame.discard(self._block_bound(op))  # what the caller did not take
            except frames.ProtocolError as exc:
                violation, outcome = str(exc), None
            except (OSError, ValueError) as exc:
                log.warning("session %s: channel failed: %s", session.session_id, exc)
                outcome = None
        if violation is not None:
            log.warning("session %s broke the protocol and is ended: %s", session.session_id, violation)
            self.terminate(session, "protocol")
            raise ProtocolViolation(
                f"The session broke the interpreter's protocol and was ended ({violation})."
            )
        if gone:
            raise ClientGone()
        if outcome is None:
            # The process ended during the call. If we ended it (Stop, expiry, shutdown) the
            # session is simply gone; otherwise it died on its own and the caller gets its status.
            if session.termination is not None and session.termination != "died":
                raise NotFound(f"Session {session.session_id} not found")
            code = self._exit_status(session)
            stderr = f"The interpreter process ended unexpectedly (exit status {code}).\n"
            signum = self._killing_signal(session, code)  # before terminate removes its cgroups
            if signum is not None:
                stderr = (
                    f"{naming.REASON_KILLED_BY_SIGNAL}:{signum}: the interpreter process was killed by "
                    f"signal {signum} ({signal.Signals(signum).name}), not by the out-of-memory killer.\n"
                )
            self.terminate(session, "died")
            return InvokeOutcome(
                stdout="",
                stderr=stderr,
                exit_code=code,
                execution_time=0.0,
                died=True,
            )
        session.last_updated_at = utc_now()
        if outcome.died:
            self.terminate(session, "died")
        return outcome

    def _block_bound(self, op: str) -> int:
        return frames.MAX_BLOCK if op == "readFiles" else _LIST_BLOCK

    def _small_blocks(self, op: str, frame: frames.Frame) -> Blocks:
        blocks: Blocks = []
        while (length := frame.next_block(self._block_bound(op))) is not None:
            blocks.append(frame.read(length))
        return blocks

    def _answer(self, op: str, frame: frames.Frame, seq: int) -> InvokeOutcome:
        """The worker's answer, checked: anything malformed is a ProtocolError, and so is an
        answer to another request than this one (`seq`): a frame user code left in the channel
        would otherwise answer this call, and the worker's own answer the next one."""
        obj = frame.obj
        if obj.get("seq") != seq or isinstance(obj.get("seq"), bool):
            raise frames.ProtocolError(f"an answer to request {obj.get('seq')!r}, not to {seq}")
        try:
            exit_code = obj.get("exit_code")
            if exit_code is not None and (not isinstance(exit_code, int) or isinstance(exit_code, bool)):
                raise TypeError("exit_code")
            execution_time = float(obj.get("execution_time", 0.0))
            counts = [obj.get(k) for k in ("stdout_bytes", "stderr_bytes")]
            if not all(c is None or (isinstance(c, int) and c >= 0) for c in counts):
                raise TypeError("byte counts")
            content = obj.get("content")
            if content is not None and not (
                isinstance(content, list) and all(isinstance(c, dict) for c in content)
            ):
                raise TypeError("content")
            task_status = obj.get("task_status")
            if task_status is not None and task_status not in TASK_STATUSES:
                raise ValueError("task_status")
            task_id = obj.get("task_id")
            if task_id is not None and not (isinstance(task_id, str) and len(task_id) <= 64):
                raise TypeError("task_id")
        except (TypeError, ValueError) as exc:
            raise frames.ProtocolError(f"malformed answer ({exc})") from exc
        outcome = InvokeOutcome(
            stdout="",
            stderr="",
            exit_code=exit_code,
            execution_time=execution_time,
            content=content,
            is_error=obj.get("is_error") if isinstance(obj.get("is_error"), bool) else None,
            died=obj.get("fatal") is True,
            stdout_bytes=counts[0],
            stderr_bytes=counts[1],
            task_id=task_id,
            task_status=task_status,
            raw_length=frame.raw_length,
        )
        if op in OUTPUT_OPS:
            limits = [self.limits.stdout_kept, self.limits.stderr_kept]
            if frame.raw_length > sum(limits) + 2 * frames.BLOCK_HEADER:
                raise frames.ProtocolError(
                    f"an answer of {frame.raw_length} raw bytes exceeds the output bounds"
                )
            blocks = frame.blocks(limits)
            outcome.stdout, outcome.stderr = (
                (blocks[i] if i < len(blocks) else b"").decode("utf-8", errors="replace") for i in (0, 1)
            )
        elif op not in BLOCK_OPS and frame.raw_length:
            raise frames.ProtocolError(f"{op} answers carry no raw part")
        return outcome

    @staticmethod
    def _killing_signal(session: Session, status: int) -> int | None:
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

    def _exit_status(self, session: Session) -> int:
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

    # --- termination ----------------------------------------------------------------------------
    def terminate(self, session: Session, reason: str) -> bool:
        """Kill the worker, free the session's files, keep a tombstone for Get. Idempotent."""
        with self._lock:
            if session.status != READY:
                return False
            session.status, session.termination = TERMINATED, reason
            session.last_updated_at = utc_now()
            self._sessions.pop(session.session_id, None)
            self._tombstones[session.session_id] = session
            while len(self._tombstones) > _TOMBSTONES:
                self._tombstones.popitem(last=False)
        self._kill(session)
        log.info("session %s terminated (%s)", session.session_id, reason)
        return True

    def _kill(self, session: Session) -> None:
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
        self._cleanup_dirs(session)

    def _cleanup_dirs(self, session: Session) -> None:
        shutil.rmtree(session.root, ignore_errors=True)
        if session.uid_lease is not None:  # its processes are gone: the uid may serve another session
            session.uid_lease.release()

    def _start_failure(self, session: Session) -> str:
        """What a session that failed to start left: its log's tail and, if its process ended, the
        exit status. Read before `_kill`, which deletes the session's directory with the log."""
        detail = self._worker_log(session)
        status = session.proc.poll() if session.proc is not None else None
        return detail if status is None else f"{detail} (exit status {status})"

    def _worker_log(self, session: Session) -> str:
        try:
            text = Path(session.root, "worker.log").read_text(errors="replace").strip()
        except OSError:
            return "no output"
        return text[-500:] or "no output"

    def _reap_loop(self) -> None:
        while not self._stop.wait(self._reap_interval):
            self.reap()

    def reap(self) -> None:
        """Expire sessions past their time-to-live, and notice workers that died while idle."""
        now = time.monotonic()
        with self._lock:
            candidates = list(self._sessions.values())
        for session in candidates:
            if session.proc is None:  # still starting
                continue
            if now >= session.expires_at:
                self.terminate(session, "expired")
            elif session.proc.poll() is not None and not session.exec_lock.locked():
                self.terminate(session, "died")

    def shutdown(self) -> None:
        """Kill every worker; no process outlives the server."""
        self._stop.set()
        self._spawner.shutdown(wait=True)
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            self.terminate(session, "shutdown")
        self._reaper.join(timeout=5)
        if self.template is not None:
            shutil.rmtree(self.template, ignore_errors=True)
        if self._egress_ca is not None:
            shutil.rmtree(os.path.dirname(self._egress_ca), ignore_errors=True)
