"""What the reaper reaps, decided per slot: every reason, and the live session of a
live turn left alone."""

from __future__ import annotations

import pytest
from reaper.sweep import UNOWNED_GRACE_SECONDS, TurnView, verdict
from sandbox_common.sessions.ledger import Slot

NOW = 1_800_000_000
TIMEOUT = 900


def _slot(**over: object) -> Slot:
    base: dict = {
        "slot_id": "s",
        "tenant_id": "acme",
        "environment": "default-public",
        "state": "active",
        "source": "cold",
        "started_at": NOW - 400,
        "session_id": "sess-1",
        "interpreter_id": "i",
        "turn_id": "t1",
    }
    return Slot(**{**base, **over})


@pytest.mark.parametrize(
    ("slot", "turn", "expected"),
    [
        (_slot(), TurnView(ended=False, session_id="sess-1"), None),  # live turn, its session: untouched
        (_slot(), TurnView(ended=True, session_id="sess-1"), "turn_ended"),
        (_slot(), None, "unowned"),  # the turn is gone
        (_slot(), TurnView(ended=False, session_id="sess-2"), "unowned"),  # the turn moved on
        (_slot(turn_id=None), None, "unowned"),
        (_slot(started_at=NOW - 60), None, None),  # younger than the grace a first call needs
        (_slot(started_at=NOW - TIMEOUT - 1), TurnView(ended=False, session_id="sess-1"), "lease_expired"),
        (_slot(state="starting", lease_expires_at=NOW - 1, session_id=None), None, "lease_expired"),
        (_slot(state="starting", lease_expires_at=NOW + 30, session_id=None), None, None),
        (_slot(state="warm", recycle_at=NOW, turn_id=None), None, "recycled"),
        (_slot(state="warm", recycle_at=NOW + 5, turn_id=None), None, None),
    ],
)
def test_verdict(slot: Slot, turn: TurnView | None, expected: str | None) -> None:
    assert verdict(slot, turn, now=NOW, session_timeout_seconds=TIMEOUT) == expected


def test_verdict_claimed_warm_session_gets_grace_from_its_claim() -> None:
    # Given a warm session started long ago but claimed just now by a turn not yet pointing at it
    slot = _slot(source="warm", started_at=NOW - 600, claimed_at=NOW - 10)
    # Then it is not unowned yet
    assert UNOWNED_GRACE_SECONDS > 10
    assert (
        verdict(slot, TurnView(ended=False, session_id=None), now=NOW, session_timeout_seconds=TIMEOUT)
        is None
    )
