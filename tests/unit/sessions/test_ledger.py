"""The live-session ledger against the serial moto server: exact caps under
concurrency, the kill switch, release exactly once, warm claims that never share a session."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sandbox_common import aws, dimensions
from sandbox_common import naming as n
from sandbox_common.sessions.ledger import LedgerUnavailable, SessionCapReached, SessionCaps, SessionLedger

STAGE = "test"  # the conftest fixtures create the tables of this stage

NOW = 1_800_000_000


@pytest.fixture
def ledger(tables: dict[str, str]) -> SessionLedger:
    return SessionLedger(table_name=n.SESSIONS.physical(STAGE), ddb=aws.client("dynamodb"), clock=lambda: NOW)


CAP3 = SessionCaps(3, 200)


def _reserve(ledger: SessionLedger, tenant: str = "acme", caps: SessionCaps = CAP3) -> str:
    return ledger.reserve(
        tenant_id=tenant, environment="default-public", source="cold", caps=caps, lease_seconds=60
    ).slot_id


def _table_items(ddb: Any) -> list[dict[str, Any]]:
    return ddb.scan(TableName=n.SESSIONS.physical(STAGE))["Items"]


def test_reserve_concurrent_against_tenant_cap_admits_exactly_cap(ledger: SessionLedger) -> None:
    # Given cap 3 and 10 concurrent reservations
    admitted: list[str] = []
    refused: list[str] = []
    lock = threading.Lock()

    def one() -> None:
        try:
            slot = _reserve(
                SessionLedger(table_name=ledger.table, ddb=aws.client("dynamodb"), clock=lambda: NOW)
            )
            with lock:
                admitted.append(slot)
        except SessionCapReached as exc:
            with lock:
                refused.append(exc.dimension)

    threads = [threading.Thread(target=one) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then exactly 3 hold a slot and the counters agree
    assert len(admitted) == 3
    assert refused == [dimensions.TENANT_SESSIONS.name] * 7
    assert ledger.live_counts("acme") == (3, 3)
    assert len(ledger.slots()) == 3


def test_reserve_global_cap_refuses_with_global_dimension(ledger: SessionLedger) -> None:
    # Given the stage holds 2 sessions of other tenants and global_sessions is 2
    _reserve(ledger, "globex", SessionCaps(20, 2))
    _reserve(ledger, "globex", SessionCaps(20, 2))
    # When acme asks
    with pytest.raises(SessionCapReached) as caught:
        _reserve(ledger, "acme", SessionCaps(20, 2))
    # Then
    assert caught.value.dimension == dimensions.GLOBAL_SESSIONS.name
    assert ledger.live_counts("acme") == (0, 2)


def test_reserve_both_full_reports_tenant_sessions(ledger: SessionLedger) -> None:
    _reserve(ledger, "acme", SessionCaps(1, 1))
    with pytest.raises(SessionCapReached) as caught:
        _reserve(ledger, "acme", SessionCaps(1, 1))
    assert caught.value.dimension == dimensions.TENANT_SESSIONS.name


@pytest.mark.parametrize(
    ("caps", "dimension"), [(SessionCaps(0, 200), "tenant_sessions"), (SessionCaps(20, 0), "global_sessions")]
)
def test_reserve_zero_cap_is_kill_switch_and_writes_nothing(
    ledger: SessionLedger, ddb: Any, caps: SessionCaps, dimension: str
) -> None:
    with pytest.raises(SessionCapReached) as caught:
        _reserve(ledger, "acme", caps)
    assert caught.value.dimension == dimension
    assert caught.value.kill_switch is True
    assert _table_items(ddb) == []


def test_release_frees_slot_once(ledger: SessionLedger) -> None:
    # Given a full tenant (cap 1)
    slot = _reserve(ledger, "acme", SessionCaps(1, 200))
    with pytest.raises(SessionCapReached):
        _reserve(ledger, "acme", SessionCaps(1, 200))
    # When the session is released twice (dispatch and the reaper racing)
    first = ledger.release(slot)
    second = ledger.release(slot)
    # Then it is freed exactly once and the slot is usable again
    assert (first, second) == (True, False)
    assert ledger.live_counts("acme") == (0, 0)
    assert _reserve(ledger, "acme", SessionCaps(1, 200))


def test_release_concurrent_frees_exactly_once(ledger: SessionLedger) -> None:
    slot = _reserve(ledger)
    results: list[bool] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(
                SessionLedger(table_name=ledger.table, ddb=aws.client("dynamodb")).release(slot)
            )
        )
        for _ in range(5)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 4 + [True]
    assert ledger.live_counts("acme") == (0, 0)


def test_activate_records_session_on_starting_slot(ledger: SessionLedger) -> None:
    slot = _reserve(ledger)
    assert ledger.activate(slot, session_id="s-1", interpreter_id="i-1") is True
    got = ledger.get(slot)
    assert got is not None
    assert (got.state, got.session_id, got.interpreter_id, got.lease_expires_at) == (
        "active",
        "s-1",
        "i-1",
        None,
    )
    assert ledger.activate(slot, session_id="s-2", interpreter_id="i-1") is False  # only once
    assert ledger.find_session("s-1") == got


def _warm(ledger: SessionLedger, session_id: str, recycle_at: int = NOW + 600, tenant: str = "acme") -> str:
    slot = ledger.reserve(
        tenant_id=tenant,
        environment="default-public",
        source="warm",
        caps=SessionCaps(20, 200),
        lease_seconds=60,
    ).slot_id
    assert ledger.make_warm(slot, session_id=session_id, interpreter_id="i-1", recycle_at=recycle_at)
    return slot


def test_claim_warm_hands_out_a_warm_session_once(ledger: SessionLedger) -> None:
    # Given one warm session
    _warm(ledger, "warm-1")
    # When two turns claim
    first = ledger.claim_warm(
        tenant_id="acme", environment="default-public", turn_id="t1", agent_id="a", min_life_seconds=150
    )
    second = ledger.claim_warm(
        tenant_id="acme", environment="default-public", turn_id="t2", agent_id="a", min_life_seconds=150
    )
    # Then the first gets it, bound to its turn, and the pool is empty for the second
    assert first is not None
    assert (first.session_id, first.state, first.turn_id, first.source) == ("warm-1", "active", "t1", "warm")
    assert second is None


def test_claim_warm_concurrent_turns_never_share_a_session(ledger: SessionLedger) -> None:
    # Given 3 warm sessions and 8 turns claiming at once
    for i in range(3):
        _warm(ledger, f"warm-{i}")
    got: list[Any] = []
    lock = threading.Lock()

    def claim(turn: str) -> None:
        mine = SessionLedger(table_name=ledger.table, ddb=aws.client("dynamodb"), clock=lambda: NOW)
        slot = mine.claim_warm(
            tenant_id="acme", environment="default-public", turn_id=turn, agent_id="a", min_life_seconds=150
        )
        with lock:
            got.append((turn, slot.session_id if slot else None))

    threads = [threading.Thread(target=claim, args=(f"t{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sessions = [s for _, s in got if s is not None]
    # Then each warm session went to exactly one turn
    assert len(got) == 8
    assert sorted(sessions) == ["warm-0", "warm-1", "warm-2"]


def test_claim_warm_skips_sessions_about_to_be_recycled_and_other_pools(ledger: SessionLedger) -> None:
    _warm(ledger, "old", recycle_at=NOW + 60)  # recycled within a call's life
    _warm(ledger, "globex-1", tenant="globex")
    got = ledger.claim_warm(
        tenant_id="acme", environment="default-public", turn_id="t", agent_id="a", min_life_seconds=150
    )
    assert got is None


def test_claim_warm_never_hands_out_a_starting_slot(ledger: SessionLedger) -> None:
    # Given a refill that reserved a slot but whose preamble has not passed (state starting)
    _reserve(ledger)
    got = ledger.claim_warm(
        tenant_id="acme", environment="default-public", turn_id="t", agent_id="a", min_life_seconds=0
    )
    assert got is None


def test_ledger_store_down_fails_closed(moto_endpoint: str) -> None:
    # Given a table that does not exist
    ledger = SessionLedger(table_name="missing", ddb=aws.client("dynamodb"))
    with pytest.raises(LedgerUnavailable):
        _reserve(ledger)
