"""What an allowlist session sent during one call: the audit row's `egress`, and the egress cap's
refusal (sandbox_common.egress_usage).

The proxy counts per session, in the session's `counters` item. A call's figures are the
difference between two readings, placed so that the call gets no deeper:
- `read_before`, sent ahead at t=0 with the turn claim and the pre-flight read: once the turn
  says which session the call will use (and the tenant's substrate says that session is an
  allowlist one), one GetItem of the session's `attributed` item — the counters as far as earlier
  calls' rows took them — in parallel with the quota hop, which is as deep; it is joined right
  before the code runs (`baseline`);
- `start_after`, one GetItem of `counters`, sent beside the artifact helper once the code has
  answered and joined after it; the reading is then written as `attributed` inside the call's
  record transaction (`attributed_items`): no request of its own.
Why `attributed` and not a fresh reading at the start: the proxy adds allowed requests and bytes
about once a second, so the end reading can miss a call's last moments; starting the next call
from what the rows took puts those bytes in the next row instead of in none.
A call whose session was started or claimed for it starts from zero (egress_usage.Baseline).
A reading that fails leaves the call's figures as the session's since its start (the baseline
zero) or, at the end, zeros: the figures are a record, never a reason to fail the call.

When the proxy refused the session a connection because a cap was reached (`cap_refused`
counted up during the call), the call's answer is SandboxCapExceeded naming that dimension,
whatever the code did with the refusal; its output still comes back.
"""

from __future__ import annotations

from concurrent.futures import Executor, Future
from typing import Any

from sandbox_common import egress_usage, messages
from sandbox_common.egress_usage import Baseline, Counters
from sandbox_common.errors import SandboxCapExceeded
from sandbox_common.observability import logger
from sandbox_common.outcome import Outcome
from sandbox_common.windows import Windows, iso_z, utc_now
from sandbox_runtime.egress_store import EgressStore, EgressStoreUnavailable
from sandbox_runtime.preflight import PreflightReader

from dispatch.turns.store import Turn


def read_before(
    store: EgressStore | None, preflight: PreflightReader, claim: Future[Turn], warm: Future[Any]
) -> Baseline | None:
    """The counters of the turn's live session, when it is an allowlist one (None otherwise)."""
    if store is None:
        return None
    turn = claim.result()
    if not turn.live_session or not turn.interpreter_id or not turn.session_id:
        return None
    warm.exception()  # the pre-flight read sent beside the claim has cached the tenant's substrate
    try:
        environment = preflight.interpreter_environment(turn.tenant_id, turn.interpreter_id)
    except Exception:  # noqa: BLE001 — the pre-flight step reports its own failure
        return None
    if not egress_usage.is_allowlist(environment):
        return None
    try:
        return Baseline(turn.session_id, store.attributed(turn.session_id))
    except EgressStoreUnavailable as exc:
        logger.warning("egress_counters_unread", extra={"failure_reason": exc.reason, "at": "start"})
        return None


def baseline(before: Future[Baseline | None] | None) -> Baseline | None:
    """The reading sent ahead, joined (its failure is a missing baseline, never the call's)."""
    if before is None:
        return None
    try:
        return before.result()
    except Exception:  # noqa: BLE001 — e.g. the turn claim's own refusal, reported by its step
        return None


def start_after(store: EgressStore | None, outcome: Outcome, pool: Executor) -> Future[Counters] | None:
    """The end reading, sent now (beside the artifact helper) when the call used an allowlist session."""
    if store is None or not outcome.session_id or not egress_usage.is_allowlist(outcome.environment):
        return None
    return pool.submit(store.counters, str(outcome.session_id))


def settle(outcome: Outcome, after: Future[Counters] | None) -> Counters | None:
    """The call's `egress` from the two readings, and the cap refusal when the proxy recorded one;
    returns the end reading, which the call's record carries as the session's `attributed`."""
    if after is None:
        return None
    try:
        counters = after.result()
    except EgressStoreUnavailable as exc:
        logger.warning("egress_counters_unread", extra={"failure_reason": exc.reason, "at": "end"})
        return None
    session_id = str(outcome.session_id)
    outcome.egress = egress_usage.usage(outcome.environment, session_id, outcome.egress_baseline, counters)
    dimension = egress_usage.cap_refused(session_id, outcome.egress_baseline, counters)
    if dimension is not None:
        resets_at = iso_z(Windows.at(utc_now()).day_resets_at)  # egress caps count per UTC day
        outcome.fail(
            SandboxCapExceeded(
                messages.cap_exceeded(dimension, resets_at),
                dimension=dimension,
                resets_at=resets_at,
                failure_reason=f"cap_exceeded:{dimension}",
            )
        )
    return counters


def attributed_items(
    store: EgressStore | None, outcome: Outcome, reading: Counters | None, lifetime_seconds: int
) -> list[dict[str, Any]]:
    """The end reading as the session's `attributed` item, a Put that rides the call's record
    transaction (idempotency completion + audit row): no request of its own. If that transaction
    does not go out, the write is dropped and the next call's figures start from an earlier
    reading: more in that row, nothing lost."""
    if store is None or reading is None or not outcome.session_id:
        return []
    return [store.attribute_put(str(outcome.session_id), reading, lifetime_seconds)]


def attribute_now(
    store: EgressStore | None, outcome: Outcome, reading: Counters | None, lifetime_seconds: int
) -> None:
    """The same write on its own, for a call whose record has no transaction (a paused call's end)."""
    if store is None or reading is None or not outcome.session_id:
        return
    try:
        store.attribute(str(outcome.session_id), reading, lifetime_seconds)
    except EgressStoreUnavailable as exc:
        logger.warning("egress_attributed_unwritten", extra={"failure_reason": exc.reason})
