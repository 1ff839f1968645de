"""A new cold session's activation writes, sent beside the user code (off the critical path).

After Start and the readiness preamble, two conditional writes make a new session the turn's: its
session-ledger slot `starting` → `active` (`SessionLedger.activate`) and the turn's lease → `active`
with the session id (`TurnStore.activate`). Neither changes what the code may do: the preamble
already passed, so the session is mitigated before the turn points at it (a
concurrent first call waiting on the lease may run in it from then on), and the reservation
already holds its capacity. So the lease winner queues them (`send`), the call sends them (`go`)
just before the user code's InvokeCodeInterpreter (so they travel beside it rather than before it:
sent at Start's end, they would land before the code even left), and joins them (`failure`) as soon
as the code has answered, before anything else uses the session.

If one of them failed, the session is not (or not accountably) the turn's: the reaper released the
slot whose lease expired, another caller took the turn's lease over, end_turn ended the turn, or the
store gave no answer. Then `TurnSessions.confirm` stops the session, frees its slot and points the
turn away from it — no session is left leaked — and the call fails closed (SandboxError; the code
ran, so it is billed, and its output is withheld). Callers that do not pass an `Activation`
(background jobs, tool-calling calls) get the writes in sequence, before the code, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class Activation:
    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self._pool = pool
        self._queued: list[Callable[[], object]] = []
        self._sent: list[Future[Any]] = []
        # the session the writes activate, filled by the lease winner that started it
        self.session_id: str | None = None
        self.interpreter_id: str | None = None
        self.slot_id: str | None = None
        self.owner: str | None = None  # the invocation that holds the turn's lease

    @property
    def pending(self) -> bool:
        return bool(self._queued or self._sent)

    def send(self, write: Callable[[], object]) -> None:
        """Queue `write()` (it raises when the write did not apply); `go` sends it."""
        self._queued.append(write)

    def go(self) -> None:
        """Send every queued write on the shared pool, now."""
        queued, self._queued = self._queued, []
        self._sent.extend(self._pool.submit(write) for write in queued)

    def failure(self) -> BaseException | None:
        """Wait for every write (sending what is still queued): the first one's exception, None
        when all applied."""
        self.go()
        sent, self._sent = self._sent, []
        first: BaseException | None = None
        for future in sent:
            exc = future.exception()
            if exc is not None and first is None:
                first = exc
        return first
