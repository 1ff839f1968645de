"""The warm first call's ONE write on moto: begin_turn notes a warm session on
the turn (a hint, `TurnStore.set_hint`), and the first call claims that slot AND binds the turn in
one TransactWriteItems (`SessionLedger.claim_warm_bound` with `TurnStore.bind_item`). Both apply or
neither; a stale hint (claimed by another turn, not warm, about to be recycled, another session)
changes nothing."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from dispatch.turns.store import Turn, TurnStore
from sandbox_common import aws, limits
from sandbox_common import naming as n
from sandbox_common.sessions.ledger import SessionCaps, SessionLedger, Slot

from .conftest import STAGE

NOW = 1_800_000_000
MIN_LIFE = 150


@pytest.fixture
def ledger(tables: dict[str, str]) -> SessionLedger:
    return SessionLedger(table_name=n.SESSIONS.physical(STAGE), ddb=aws.client("dynamodb"), clock=lambda: NOW)


@pytest.fixture
def turns(tables: dict[str, str]) -> TurnStore:
    return TurnStore(table_name=n.TURNS.physical(STAGE), ddb=aws.client("dynamodb"), clock=lambda: NOW)


def _warm(ledger: SessionLedger, session_id: str, recycle_at: int = NOW + 600) -> Slot:
    slot_id = ledger.reserve(
        tenant_id="acme",
        environment="default-public",
        source="warm",
        caps=SessionCaps(20, 200),
        lease_seconds=60,
    ).slot_id
    assert ledger.make_warm(slot_id, session_id=session_id, interpreter_id="i-1", recycle_at=recycle_at)
    slot = ledger.get(slot_id)
    assert slot is not None
    return slot


def _turn(turns: TurnStore, turn_id: str) -> Turn:
    created = turns.create("acme", "a", turn_id)
    assert created is not None
    return created


def _claim(ledger: SessionLedger, turns: TurnStore, turn: Turn, hint: Slot) -> bool:
    bind = turns.bind_item(
        turn, str(hint.session_id), "i-1", slot_id=hint.slot_id, started_at=hint.started_at
    )
    return ledger.claim_warm_bound(
        hint, turn_id=turn.turn_id, agent_id="a", min_life_seconds=MIN_LIFE, bind=bind
    )


def test_claim_warm_bound_claims_the_slot_and_binds_the_turn_together(
    ledger: SessionLedger, turns: TurnStore
) -> None:
    # Given a warm session and a turn begun with a hint pointing at it
    warm = _warm(ledger, "warm-1")
    turn = _turn(turns, "t1")
    hint = {
        "slot_id": warm.slot_id,
        "session_id": "warm-1",
        "interpreter_id": "i-1",
        "environment": "default-public",
        "started_at": str(warm.started_at),
    }
    assert turns.set_hint(turn, hint) is True
    seen = turns.get("acme", "t1")
    assert seen is not None and seen.warm_hint == hint
    # When the first call claims it
    assert _claim(ledger, turns, seen, warm) is True
    # Then the slot serves the turn, out of the pool, and the turn points at the session
    slot = ledger.get(warm.slot_id)
    assert slot is not None and (slot.state, slot.turn_id) == ("active", "t1")
    assert ledger.warm_candidates(tenant_id="acme", environment="default-public", min_life_seconds=0) == []
    bound = turns.get("acme", "t1")
    assert bound is not None
    assert (bound.session_state, bound.session_id, bound.slot_id, bound.session_started_at) == (
        "active",
        "warm-1",
        warm.slot_id,
        warm.started_at,
    )
    # And the hint is consumed with it; a turn with a live session takes no new hint
    assert bound.warm_hint is None
    assert turns.set_hint(bound, hint) is False


def test_claim_warm_bound_concurrent_turns_sharing_hints_never_share_a_session(
    ledger: SessionLedger, turns: TurnStore
) -> None:
    # Given a pool of 2 and 6 turns begun together, each hinted at one of the two (collisions)
    pool = [_warm(ledger, "warm-0"), _warm(ledger, "warm-1")]
    begun = [_turn(turns, f"t{i}") for i in range(6)]
    got: dict[str, bool] = {}
    lock = threading.Lock()
    barrier = threading.Barrier(len(begun))

    def first_call(turn: Turn, hint: Slot) -> None:
        mine_ledger = SessionLedger(table_name=ledger.table, ddb=aws.client("dynamodb"), clock=lambda: NOW)
        mine_turns = TurnStore(table_name=turns.table, ddb=aws.client("dynamodb"), clock=lambda: NOW)
        barrier.wait()
        claimed = _claim(mine_ledger, mine_turns, turn, hint)
        with lock:
            got[turn.turn_id] = claimed

    threads = [threading.Thread(target=first_call, args=(t, pool[i % 2])) for i, t in enumerate(begun)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then every call answered, and each warm session went to exactly one turn
    assert len(got) == 6
    winners = sorted(turn_id for turn_id, claimed in got.items() if claimed)
    assert len(winners) == 2
    stored = {t.turn_id: turns.get("acme", t.turn_id) for t in begun}
    bound = sorted(str(s.session_id) for s in stored.values() if s is not None and s.session_id)
    assert bound == ["warm-0", "warm-1"]
    # And each slot's turn is the turn pointing at its session; the losers' turns hold nothing
    for slot in pool:
        now = ledger.get(slot.slot_id)
        assert now is not None and now.state == "active" and now.turn_id in winners
        turn = stored[str(now.turn_id)]
        assert turn is not None and turn.session_id == slot.session_id
    assert all(stored[t] is not None and stored[t].session_id is None for t in got if t not in winners)  # type: ignore[union-attr]


def test_claim_warm_bound_never_claims_a_slot_whose_preamble_has_not_passed(
    ledger: SessionLedger, turns: TurnStore
) -> None:
    # Given a slot the refill reserved but never offered (its preamble failed or is still running),
    # and a hint forged to point at it
    slot_id = ledger.reserve(
        tenant_id="acme",
        environment="default-public",
        source="warm",
        caps=SessionCaps(20, 200),
        lease_seconds=60,
    ).slot_id
    turn = _turn(turns, "t1")
    forged = Slot(
        slot_id=slot_id,
        tenant_id="acme",
        environment="default-public",
        state="warm",
        source="warm",
        started_at=NOW,
        session_id="failed-preamble",
        interpreter_id="i-1",
    )
    # When the first call claims it
    assert _claim(ledger, turns, turn, forged) is False
    # Then nothing changed: the slot is still the refill's, the turn holds no session
    slot = ledger.get(slot_id)
    assert slot is not None and (slot.state, slot.turn_id, slot.session_id) == ("starting", None, None)
    stored = turns.get("acme", "t1")
    assert stored is not None and stored.session_id is None


@pytest.mark.parametrize("stale", ["other_session", "recycled_soon", "other_pool"])
def test_claim_warm_bound_stale_hint_changes_nothing(
    ledger: SessionLedger, turns: TurnStore, stale: str
) -> None:
    # Given a hint that no longer describes a claimable session of this pool
    warm = _warm(ledger, "warm-1", recycle_at=NOW + 60 if stale == "recycled_soon" else NOW + 600)
    hint = warm
    if stale == "other_session":
        hint = Slot(**{**warm.__dict__, "session_id": "someone-else"})
    if stale == "other_pool":
        hint = Slot(**{**warm.__dict__, "environment": "strict-egress"})
    turn = _turn(turns, "t1")
    # When the first call claims it
    assert _claim(ledger, turns, turn, hint) is False
    # Then the session is still in its pool and the turn still has none
    slot = ledger.get(warm.slot_id)
    assert slot is not None and (slot.state, slot.turn_id) == ("warm", None)
    stored = turns.get("acme", "t1")
    assert stored is not None and stored.session_id is None


def test_claim_warm_bound_turn_moved_on_leaves_the_session_in_its_pool(
    ledger: SessionLedger, turns: TurnStore
) -> None:
    # Given a turn seen without a session, which a concurrent call of the same turn then bound
    warm = _warm(ledger, "warm-1")
    seen = _turn(turns, "t1")
    assert turns.bind(seen, "cold-1", "i-1", slot_id="slot-cold", started_at=None) is True
    # When the first call claims the hinted session on the state it saw
    assert _claim(ledger, turns, seen, warm) is False
    # Then the warm session stays in the pool for another turn and the turn keeps its session
    slot = ledger.get(warm.slot_id)
    assert slot is not None and (slot.state, slot.turn_id) == ("warm", None)
    stored = turns.get("acme", "t1")
    assert stored is not None and stored.session_id == "cold-1"


def test_set_hint_refuses_ended_turn_and_malformed_hint(turns: TurnStore) -> None:
    turn = _turn(turns, "t1")
    turns.end("acme", "t1")
    hint = {
        "slot_id": "s",
        "session_id": "x",
        "interpreter_id": "i-1",
        "environment": "default-public",
        "started_at": "1",
    }
    assert turns.set_hint(turn, hint) is False
    with pytest.raises(ValueError):
        turns.set_hint(turn, {"slot_id": "s"})


def test_turn_ignores_a_hint_it_did_not_write(turns: TurnStore, ddb: Any) -> None:
    _turn(turns, "t1")
    ddb.update_item(
        TableName=turns.table,
        Key={n.TURNS.pk: {"S": "acme"}, n.TURNS.sort_key: {"S": "t1"}},
        UpdateExpression="SET warm_hint = :h",
        ExpressionAttributeValues={":h": {"M": {"slot_id": {"S": "s"}}}},
    )
    stored = turns.get("acme", "t1")
    assert stored is not None and stored.warm_hint is None


def test_session_source_never_claims_another_tenants_session_through_a_hint(
    ledger: SessionLedger, turns: TurnStore
) -> None:
    from dispatch.sessions.source import SessionSource
    from sandbox_common.retries import RetryLog

    # Given a warm session of globex, and an acme turn whose hint names it (forged or mixed up)
    slot_id = ledger.reserve(
        tenant_id="globex",
        environment="default-public",
        source="warm",
        caps=SessionCaps(20, 200),
        lease_seconds=60,
    ).slot_id
    assert ledger.make_warm(slot_id, session_id="globex-1", interpreter_id="i-1", recycle_at=NOW + 600)
    turn = _turn(turns, "t1")
    hint = {
        "slot_id": slot_id,
        "session_id": "globex-1",
        "interpreter_id": "i-1",
        "environment": "default-public",
        "started_at": str(NOW),
    }
    source = SessionSource(
        ledger=ledger,
        caps_for=lambda _t: SessionCaps(20, 200),
        claim_min_life_seconds=MIN_LIFE,
        lease_seconds=60,
    )

    def bind(slot: Slot) -> dict[str, Any]:
        return turns.bind_item(turn, str(slot.session_id), "i-1", slot_id=slot.slot_id, started_at=None)

    # When acme's first call prepares its session with that hint
    prepared = source.prepare(
        tenant_id="acme",
        agent_id="a",
        turn_id="t1",
        environment="default-public",
        interpreter_id="i-1",
        retries=RetryLog(),
        hint=hint,
        bind=bind,
    )
    # Then it got a cold slot of its own; globex's session is untouched and the turn holds nothing
    assert (prepared.source, prepared.bound, prepared.tenant_id) == ("cold", False, "acme")
    slot = ledger.get(slot_id)
    assert slot is not None and (slot.state, slot.turn_id) == ("warm", None)
    stored = turns.get("acme", "t1")
    assert stored is not None and stored.session_id is None
    source.abandon(prepared)


def test_begin_turn_pool_empty_note_is_honoured_for_its_pool_and_window_only(turns: TurnStore) -> None:
    # Given a turn whose begin_turn found the default-public pool (interpreter i-1) empty
    turn = _turn(turns, "t1")
    assert turns.set_pool_empty(turn, environment="default-public", interpreter_id="i-1") is True
    seen = turns.get("acme", "t1")
    assert seen is not None and seen.pool_empty == {
        "environment": "default-public",
        "interpreter_id": "i-1",
        "checked_at": str(NOW),
    }
    # When the first call asks whether it may skip the pool read
    # Then only for that pool and interpreter, and only inside the window
    assert seen.pool_known_empty("default-public", "i-1", NOW + limits.WARM_POOL_EMPTY_MARK_SECONDS) is True
    assert (
        seen.pool_known_empty("default-public", "i-1", NOW + limits.WARM_POOL_EMPTY_MARK_SECONDS + 1) is False
    )
    assert seen.pool_known_empty("strict-egress", "i-1", NOW) is False
    assert seen.pool_known_empty("default-public", "i-2", NOW) is False
    assert seen.pool_known_empty("default-public", "i-1", NOW - 1) is False  # a clock behind the note


def test_begin_turn_pool_notes_replace_each_other_and_need_an_open_turn_without_session(
    ledger: SessionLedger, turns: TurnStore
) -> None:
    # Given a turn noted "empty", then begun again when the pool has a session
    warm = _warm(ledger, "warm-1")
    turn = _turn(turns, "t1")
    assert turns.set_pool_empty(turn, environment="default-public", interpreter_id="i-1") is True
    hint = {
        "slot_id": warm.slot_id,
        "session_id": "warm-1",
        "interpreter_id": "i-1",
        "environment": "default-public",
        "started_at": str(warm.started_at),
    }
    # When the hint is noted / Then it replaces the "empty" note, and the reverse
    assert turns.set_hint(turn, hint) is True
    seen = turns.get("acme", "t1")
    assert seen is not None and (seen.warm_hint, seen.pool_empty) == (hint, None)
    assert turns.set_pool_empty(turn, environment="default-public", interpreter_id="i-1") is True
    seen = turns.get("acme", "t1")
    assert seen is not None and seen.warm_hint is None and seen.pool_empty is not None
    # And a turn with a live session, or an ended one, takes no note
    assert _claim(ledger, turns, seen, warm) is True
    bound = turns.get("acme", "t1")
    assert bound is not None and bound.live_session
    assert turns.set_pool_empty(bound, environment="default-public", interpreter_id="i-1") is False
    ended = _turn(turns, "t2")
    turns.end("acme", "t2")
    assert turns.set_pool_empty(ended, environment="default-public", interpreter_id="i-1") is False
    stored = turns.get("acme", "t2")
    assert stored is not None and stored.pool_empty is None
