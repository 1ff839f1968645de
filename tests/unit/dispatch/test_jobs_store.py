"""JobStore (functions/dispatch/jobs.py) against moto's DynamoDB (serial server: per-item
atomicity as DynamoDB gives it, so the races below test our conditions, not moto's threads)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sandbox_common import naming as n
from sandbox_runtime.job_store import (
    FINISHING,
    JobExists,
    JobNotFound,
    JobRecord,
    JobStore,
    JobStoreUnavailable,
    TooManyJobs,
)


def record(
    job_id: str,
    *,
    tenant: str = "acme",
    agent: str = "agent-1",
    turn: str = "turn-1",
    submitted_ms: int = 1_700_000_000_000,
) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        tenant_id=tenant,
        agent_id=agent,
        turn_id=turn,
        session_id="S1",
        interpreter_id="sbx_test_acme_pub",
        invocation_id=f"inv-{job_id}",
        call_id=f"call-{job_id}",
        timeout_s=60,
        submitted_ms=submitted_ms,
        audit_base={"executed_code_hash": "ab"},
    )


@pytest.fixture
def store(tables: dict[str, str], ddb: Any) -> JobStore:
    return JobStore(table_name=tables[n.JOBS.logical], ddb=ddb)


def test_job_store_fourth_running_job_of_a_turn_is_refused(store):
    # Given three running jobs in a turn
    for i in range(3):
        store.create(record(f"j{i}"))
    # When a fourth is created, then it is refused and not written
    with pytest.raises(TooManyJobs):
        store.create(record("j3"))
    assert store.get("j3") is None
    assert store.turn_jobs("acme", "turn-1").running == 3
    assert store.turn_jobs("acme", "turn-1").open_jobs == ("j0", "j1", "j2")


def test_job_store_other_turns_have_their_own_slots(store):
    # Given a turn with three running jobs
    for i in range(3):
        store.create(record(f"a{i}"))
    # When another turn (and another tenant's same-named turn) submits, then they are admitted
    store.create(record("b0", turn="turn-2"))
    store.create(record("c0", tenant="globex"))
    assert store.turn_jobs("acme", "turn-2").running == 1
    assert store.turn_jobs("globex", "turn-1").running == 1


def test_job_store_exactly_three_admitted_under_concurrency(store):
    # Given ten concurrent submits in one turn
    outcomes: list[str] = []
    lock = threading.Lock()

    def submit(i: int) -> None:
        try:
            store.create(record(f"c{i}"))
            result = "ok"
        except TooManyJobs:
            result = "refused"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then exactly three were admitted and the count says three
    assert len(outcomes) == 10
    assert outcomes.count("ok") == 3
    assert store.turn_jobs("acme", "turn-1").running == 3


def test_job_store_ending_a_job_frees_its_slot(store):
    # Given three running jobs, one of which ends
    jobs = [record(f"e{i}") for i in range(3)]
    for job in jobs:
        store.create(job)
    stored = store.claim_end(jobs[0], final_state="completed", outcome={"response": {"ok": True}})
    # When a fourth is submitted, then it is admitted
    store.create(record("e3"))
    assert stored.state == FINISHING
    assert store.turn_jobs("acme", "turn-1").open_jobs == ("e1", "e2", "e3")


def test_job_store_end_is_claimed_once_first_outcome_wins(store):
    # Given a running job
    job = record("once")
    store.create(job)
    # When two observers claim its end with different outcomes
    first = store.claim_end(job, final_state="completed", outcome={"response": {"who": "first"}})
    second = store.claim_end(job, final_state="failed", outcome={"response": {"who": "second"}})
    # Then both see the first outcome and the slot was freed once
    assert (first.final_state, second.final_state) == ("completed", "completed")
    assert second.outcome == {"response": {"who": "first"}}
    assert store.turn_jobs("acme", "turn-1").running == 0


def test_job_store_mark_final_leaves_the_open_index(store):
    # Given two jobs, one ended and marked final
    done, running = record("f1"), record("f2", submitted_ms=1_700_000_001_000)
    store.create(done)
    store.create(running)
    store.mark_final(store.claim_end(done, final_state="cancelled", outcome={"response": {}}))
    # When the open jobs are listed, then only the running one is there
    assert [r.job_id for r in store.open_jobs()] == ["f2"]
    assert store.get("f1").state == "cancelled"


def test_job_store_get_owned_refuses_foreign_jobs_like_unknown_ones(store):
    # Given acme's job
    store.create(record("mine"))
    # When another tenant, agent or turn asks for it, or for an unknown id
    refusals = []
    for kwargs in (
        {"tenant_id": "globex", "agent_id": "agent-1", "turn_id": "turn-1"},
        {"tenant_id": "acme", "agent_id": "agent-2", "turn_id": "turn-1"},
        {"tenant_id": "acme", "agent_id": "agent-1", "turn_id": "turn-9"},
    ):
        with pytest.raises(JobNotFound) as foreign:
            store.get_owned("mine", **kwargs)
        refusals.append(str(foreign.value))
    with pytest.raises(JobNotFound) as unknown:
        store.get_owned("nope", tenant_id="acme", agent_id="agent-1", turn_id="turn-1")
    # Then every refusal is the same exception; the owner gets it
    assert len(refusals) == 3
    assert all(r == "mine" for r in refusals) and str(unknown.value) == "nope"
    assert store.get_owned("mine", tenant_id="acme", agent_id="agent-1", turn_id="turn-1").job_id == "mine"


def test_job_store_duplicate_job_id_is_refused(store):
    # Given a job
    store.create(record("dup"))
    # When the same id is created again, then it is refused and the slot count is unchanged
    with pytest.raises(JobExists):
        store.create(record("dup"))
    assert store.turn_jobs("acme", "turn-1").running == 1


def test_job_store_lists_a_tenants_jobs_newest_first(store):
    # Given jobs of two tenants
    store.create(record("old", submitted_ms=1_700_000_000_000))
    store.create(record("new", turn="turn-2", submitted_ms=1_700_000_005_000))
    store.create(record("other", tenant="globex"))
    # When acme's jobs are listed, then only acme's, newest first
    assert [r.job_id for r in store.list_jobs(tenant_id="acme")] == ["new", "old"]
    assert {r.job_id for r in store.list_jobs()} == {"old", "new", "other"}


def test_job_store_unavailable_fails_closed(store, monkeypatch):
    # Given a DynamoDB that fails
    def broken(**_kwargs: Any) -> None:
        raise RuntimeError("down")

    monkeypatch.setattr(store.ddb, "transact_write_items", broken)
    # When a job is created, then the store says unavailable
    with pytest.raises(JobStoreUnavailable):
        store.create(record("x"))


def test_job_store_busy_sessions_are_those_with_open_jobs(store):
    # Given a session with a running job and another whose only job ended
    running = record("b1")
    ended = JobRecord(**{**record("b2", turn="turn-2").__dict__, "session_id": "S2"})
    store.create(running)
    store.create(ended)
    store.mark_final(store.claim_end(ended, final_state="completed", outcome={"response": {}}))
    # When the reaper asks which sessions are busy, then only the one with a running job
    assert store.busy_sessions() == {"S1"}
