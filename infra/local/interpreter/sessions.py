"""Sessions of the local interpreter: the manager that starts, finds, calls, expires and ends them
(no HTTP here; a session's worker process is worker_process.py's, its answers answers.py's).

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

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sandbox_common import naming

from infra.local.interpreter import disk, egress, isolation, s3relay, worker_process
from infra.local.interpreter.answers import (
    BLOCK_OPS,
    SMALL_RAW,
    BlockSink,
    ClientGone,
    InvokeOutcome,
    ProtocolViolation,
    block_bound,
    read_answer,
    small_blocks,
)
from infra.local.interpreter.isolation import IsolationUnavailable, Limits
from infra.local.interpreter.registry import InterpreterRegistry
from infra.local.interpreter.session import (
    READY,
    TERMINATED,
    NotFound,
    QuotaExceeded,
    Session,
    new_session_id,
    utc_now,
)
from infra.local.interpreter.uids import UidAllocator
from infra.local.interpreter.worker import frames
from infra.local.interpreter.worker_process import WorkerFailure, WorkerLauncher

log = logging.getLogger("local-interpreter")

DEFAULT_SESSION_TIMEOUT = 900
MAX_SESSION_TIMEOUT = 28_800
_TOMBSTONES = 2_000  # terminated sessions remembered for Get


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
        if allow_unisolated is None:  # the operator's explicit escape hatch (docs/local-stack.md)
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
        self.launcher = WorkerLauncher(
            plan=self.plan,
            limits=self.limits,
            python=self.python,
            template=self.template,
            uids=uids or UidAllocator(),
            registry=InterpreterRegistry(interpreters, registry_file, data_grants),
        )
        self.max_sessions = max_sessions
        self.base_dir = base_dir
        self._lock = threading.RLock()
        # VPC sessions reach the egress proxy, and only it (egress.py); without one they are refused.
        if egress_proxy is not None:
            self.attach_egress(egress_proxy)
        self._sessions: dict[str, Session] = {}
        self._tombstones: OrderedDict[str, Session] = OrderedDict()
        self._client_tokens: OrderedDict[tuple[str, str], str] = OrderedDict()
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
            previous = self.launcher.egress_ca
            self.launcher.egress_proxy, self.launcher.egress_ca = proxy, ca
        if previous is not None:
            shutil.rmtree(os.path.dirname(previous), ignore_errors=True)

    # --- interpreters ---------------------------------------------------------------------------
    def register_interpreter(
        self, interpreter_id: str, network_mode: str, data: s3relay.DataGrant | None = None
    ) -> None:
        """`data`: what its sessions may read of the emulated S3 (s3relay.py)."""
        self.launcher.registry.register(interpreter_id, network_mode, data)

    def interpreters(self) -> dict[str, str]:
        return self.launcher.registry.all()

    def resolve_interpreter(self, identifier: str) -> tuple[str, str]:
        """(interpreter id, network mode); an ARN ending in `/<id>` names the same interpreter."""
        return self.launcher.registry.resolve(identifier)

    # --- sessions -------------------------------------------------------------------------------
    def start(
        self, identifier: str, *, name: str | None, timeout_seconds: int | None, client_token: str | None
    ) -> Session:
        interpreter_id, mode = self.resolve_interpreter(identifier)
        self.plan.check(mode)  # isolated or refused: nothing is created for a refused session
        if mode == "VPC" and self.launcher.egress_ca is None:
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
        for attempt in range(1, worker_process.START_TRIES + 1):
            try:
                session = self._start_one(interpreter_id, mode, name, timeout)
                break
            except WorkerFailure as exc:
                if attempt == worker_process.START_TRIES or not worker_process.transient_start_failure(exc):
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
            self._spawner.submit(self.launcher.spawn, session).result()
        except BaseException:
            with self._lock:
                self._sessions.pop(session_id, None)
            worker_process.kill(session)
            raise
        return session

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
                    outcome = read_answer(op, frame, session.seq, self.limits)
                    if outcome.content_blocks is None and op in BLOCK_OPS:
                        if frame.raw_length <= SMALL_RAW:
                            outcome.content_blocks = small_blocks(op, frame)
                        elif on_blocks is not None:
                            try:
                                on_blocks(outcome, frame)
                            except ClientGone:
                                gone = True
                            outcome.streamed = True
                        frame.discard(block_bound(op))  # what the caller did not take
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
            code = worker_process.exit_status(session)
            stderr = f"The interpreter process ended unexpectedly (exit status {code}).\n"
            signum = worker_process.killing_signal(session, code)  # before terminate removes its cgroups
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
        worker_process.kill(session)
        log.info("session %s terminated (%s)", session.session_id, reason)
        return True

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
        if self.launcher.egress_ca is not None:
            shutil.rmtree(os.path.dirname(self.launcher.egress_ca), ignore_errors=True)
