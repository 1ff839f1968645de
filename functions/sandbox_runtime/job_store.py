"""Dispatch-side state of background jobs (docs/jobs.md): the data-access layer over the JOBS table.

Items (naming.JOBS, key `job_key`):
- `job#{job_id}`: tenant_id, agent_id, turn_id, turn_token_sha256 (the turn's), session_id,
  interpreter_id, invocation_id, call_id, timeout_s, submitted_at / deadline_at (ISO, index keys),
  submitted_ms, audit_base
  (JSON: the audit fields known at submit), state, and once it ended: final_state, outcome
  (zlib-compressed JSON: the agent's final answer and the runner's audit fields), ended_ms.
- `turn#{tenant_id}#{turn_id}`: `running` (slots in use) and `open_jobs` (string set).

Guarantees, each one conditional write:
- at most MAX_RUNNING_JOBS_PER_TURN running jobs per turn, exact under concurrency: the slot
  increment (`running < max`) and the job's creation commit together or not at all;
- a job ends exactly once: `claim_end` moves it running → finishing *with its outcome* and frees
  its slot in one transaction; only one observer wins. The audit row is then written (its put is
  conditional on the invocation id, so a second writer is a no-op) and `mark_final` moves it
  finishing → final. A crash between the steps leaves a `finishing` job in the `by_open` index:
  the next observer (get_job, end_turn, the reaper's `finish_due_jobs`) completes it from the
  stored outcome, so the row is written once and never from two different outcomes.
- a job is only ever found by its owner: `get_owned` answers JobNotFound for an unknown id and
  for another tenant's, agent's or turn's job alike.
"""

from __future__ import annotations

import hashlib
import json
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError
from sandbox_common import ddb_item, limits
from sandbox_common import naming as n

RUNNING, FINISHING = "running", "finishing"
FINAL_STATES = ("completed", "failed", "timed_out", "cancelled")
# DynamoDB items are ≤ 400 KB: the stored outcome stays below this after compression.
MAX_OUTCOME_BYTES = 300_000
_JOB_TTL_SECONDS = 30 * 86_400


class JobStoreUnavailable(Exception):
    """DynamoDB failed: callers fail closed (no job started, state unknown)."""


class JobNotFound(Exception):
    """Unknown job id, or a job of another tenant/agent/turn: the same answer for both."""


class TooManyJobs(Exception):
    """The turn already has MAX_RUNNING_JOBS_PER_TURN running jobs."""


class JobExists(Exception):
    """A job with this id already exists."""


def iso_ms(epoch_ms: int) -> str:
    return (
        datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def job_id_for(invocation_id: str) -> str:
    """A background submit's job id, from the invocation id its claim carries: the call's one row
    is the job's (written under that invocation id), and a finisher of a submit whose dispatch
    died finds the job it may have created (`sandbox_runtime.interrupted`)."""
    return f"job-{hashlib.sha256(invocation_id.encode('utf-8')).hexdigest()[:32]}"


def job_key(job_id: str) -> str:
    return f"{n.JOB_KEY_PREFIX}{job_id}"


def turn_key(tenant_id: str, turn_id: str) -> str:
    return f"{n.JOB_TURN_KEY_PREFIX}{tenant_id}#{turn_id}"


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    tenant_id: str
    agent_id: str
    turn_id: str
    session_id: str
    interpreter_id: str
    invocation_id: str
    call_id: str
    timeout_s: int
    submitted_ms: int
    state: str = RUNNING  # running | finishing | completed | failed | timed_out | cancelled
    final_state: str | None = None
    outcome: dict[str, Any] | None = None
    ended_ms: int | None = None
    audit_base: dict[str, Any] = field(default_factory=dict)
    # the SHA-256 of the job's turn token, copied from the turn at submit ("" = token-less
    # turn; None = a job item from before it was kept: get_job reads the turn instead).
    turn_token_hash: str | None = None

    @property
    def deadline_ms(self) -> int:
        return self.submitted_ms + self.timeout_s * 1000

    @property
    def open(self) -> bool:
        return self.state in (RUNNING, FINISHING)

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            n.JOBS.pk: {"S": job_key(self.job_id)},
            "job_id": {"S": self.job_id},
            "tenant_id": {"S": self.tenant_id},
            "agent_id": {"S": self.agent_id},
            "turn_id": {"S": self.turn_id},
            "session_id": {"S": self.session_id},
            "interpreter_id": {"S": self.interpreter_id},
            "invocation_id": {"S": self.invocation_id},
            "call_id": {"S": self.call_id},
            "timeout_s": {"N": str(self.timeout_s)},
            "submitted_ms": {"N": str(self.submitted_ms)},
            n.JOB_ATTR_SUBMITTED_AT: {"S": iso_ms(self.submitted_ms)},
            n.JOB_ATTR_DEADLINE_AT: {"S": iso_ms(self.deadline_ms)},
            "state": {"S": self.state},
            "audit_base": {"S": json.dumps(self.audit_base, sort_keys=True)},
            n.TTL_ATTRIBUTE: {"N": str(self.submitted_ms // 1000 + _JOB_TTL_SECONDS)},
        }
        if self.open:
            item[n.JOB_ATTR_OPEN] = {"S": n.JOB_OPEN_SHARD}
        if self.turn_token_hash is not None:
            item[n.JOB_ATTR_TURN_TOKEN_HASH] = {"S": self.turn_token_hash}
        return item

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> JobRecord:
        s, i = ddb_item.readers(item)

        outcome = None
        if "outcome" in item and "B" in item["outcome"]:
            outcome = json.loads(zlib.decompress(item["outcome"]["B"]).decode("utf-8"))
        return cls(
            job_id=s("job_id") or "",
            tenant_id=s("tenant_id") or "",
            agent_id=s("agent_id") or "",
            turn_id=s("turn_id") or "",
            session_id=s("session_id") or "",
            interpreter_id=s("interpreter_id") or "",
            invocation_id=s("invocation_id") or "",
            call_id=s("call_id") or "",
            timeout_s=i("timeout_s") or 0,
            submitted_ms=i("submitted_ms") or 0,
            state=s("state") or RUNNING,
            final_state=s("final_state"),
            outcome=outcome,
            ended_ms=i("ended_ms"),
            audit_base=json.loads(s("audit_base") or "{}"),
            turn_token_hash=s(n.JOB_ATTR_TURN_TOKEN_HASH),
        )


@dataclass(frozen=True)
class TurnJobs:
    running: int
    open_jobs: tuple[str, ...]


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _reasons(exc: ClientError) -> list[str]:
    return [str(r.get("Code") or "None") for r in exc.response.get("CancellationReasons", [])]


def _compress(outcome: dict[str, Any]) -> bytes:
    blob = zlib.compress(json.dumps(outcome, sort_keys=True).encode("utf-8"), 6)
    if len(blob) <= MAX_OUTCOME_BYTES:
        return blob
    # Output that does not compress below the item limit: keep the answer's shape, trim output.
    trimmed = json.loads(json.dumps(outcome))
    for key in ("stdout", "stderr"):
        if isinstance(trimmed.get("response", {}).get(key), str):
            trimmed["response"][key] = trimmed["response"][key][: 64 * 1024]
    trimmed["response"]["replay_output_trimmed"] = True
    return zlib.compress(json.dumps(trimmed, sort_keys=True).encode("utf-8"), 9)


class JobStore:
    def __init__(
        self,
        *,
        table_name: str,
        ddb: Any,
        clock: Callable[[], float] = time.time,
        max_running: int = limits.MAX_RUNNING_JOBS_PER_TURN,
    ) -> None:
        self.table = table_name
        self.ddb = ddb
        self.clock = clock
        self.max_running = max_running

    # --- submit -------------------------------------------------------------------------------
    def create(self, record: JobRecord) -> None:
        """Take one of the turn's slots and create the job, atomically.

        Raises TooManyJobs (all slots taken: nothing written), JobExists, JobStoreUnavailable."""
        try:
            self.ddb.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": n.JOBS.key(turn_key(record.tenant_id, record.turn_id)),
                            "UpdateExpression": (
                                "SET #r = if_not_exists(#r, :zero) + :one, tenant_id = :t, turn_id = :u, "
                                "expires_at = :exp ADD open_jobs :ids"
                            ),
                            "ConditionExpression": "attribute_not_exists(#r) OR #r < :max",
                            "ExpressionAttributeNames": {"#r": "running"},
                            "ExpressionAttributeValues": {
                                ":zero": {"N": "0"},
                                ":one": {"N": "1"},
                                ":max": {"N": str(self.max_running)},
                                ":ids": {"SS": [record.job_id]},
                                ":t": {"S": record.tenant_id},
                                ":u": {"S": record.turn_id},
                                ":exp": {"N": str(record.submitted_ms // 1000 + _JOB_TTL_SECONDS)},
                            },
                        }
                    },
                    {
                        "Put": {
                            "TableName": self.table,
                            "Item": record.to_item(),
                            "ConditionExpression": "attribute_not_exists(job_key)",
                        }
                    },
                ]
            )
        except ClientError as exc:
            if _code(exc) == "TransactionCanceledException":
                reasons = _reasons(exc)
                if reasons and reasons[0] == "ConditionalCheckFailed":
                    raise TooManyJobs(record.turn_id) from None
                if len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed":
                    raise JobExists(record.job_id) from None
            raise JobStoreUnavailable(_code(exc) or type(exc).__name__) from None
        except Exception as exc:  # noqa: BLE001 — any store failure: fail closed
            raise JobStoreUnavailable(type(exc).__name__) from None

    def release(self, record: JobRecord) -> None:
        """Undo `create` for a job whose launch failed before it could run: delete the job item
        and free its slot, in one transaction (the job never ran, so nothing is audited twice)."""
        try:
            self.ddb.transact_write_items(
                TransactItems=[
                    {
                        "Delete": {
                            "TableName": self.table,
                            "Key": n.JOBS.key(job_key(record.job_id)),
                            "ConditionExpression": "#s = :running",
                            "ExpressionAttributeNames": {"#s": "state"},
                            "ExpressionAttributeValues": {":running": {"S": RUNNING}},
                        }
                    },
                    self._free_slot(record),
                ]
            )
        except Exception as exc:  # noqa: BLE001
            raise JobStoreUnavailable(type(exc).__name__) from None

    def bind_session(
        self, record: JobRecord, *, session_id: str, interpreter_id: str, timeout_s: int | None = None
    ) -> JobRecord:
        """Record the session a reserved job runs in (before it is launched there), and its
        effective timeout (which also moves its deadline in the by_open index)."""
        bound = JobRecord(
            **{
                **record.__dict__,
                "session_id": session_id,
                "interpreter_id": interpreter_id,
                "timeout_s": record.timeout_s if timeout_s is None else timeout_s,
            }
        )
        try:
            self.ddb.update_item(
                TableName=self.table,
                Key=n.JOBS.key(job_key(record.job_id)),
                UpdateExpression="SET session_id = :s, interpreter_id = :i, timeout_s = :t, deadline_at = :d",
                ConditionExpression="#s = :running",
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues={
                    ":s": {"S": session_id},
                    ":i": {"S": interpreter_id},
                    ":t": {"N": str(bound.timeout_s)},
                    ":d": {"S": iso_ms(bound.deadline_ms)},
                    ":running": {"S": RUNNING},
                },
            )
        except Exception as exc:  # noqa: BLE001
            raise JobStoreUnavailable(type(exc).__name__) from None
        return bound

    # --- read ---------------------------------------------------------------------------------
    def get(self, job_id: str) -> JobRecord | None:
        try:
            out = self.ddb.get_item(
                TableName=self.table, Key=n.JOBS.key(job_key(job_id)), ConsistentRead=True
            )
        except Exception as exc:  # noqa: BLE001
            raise JobStoreUnavailable(type(exc).__name__) from None
        item = out.get("Item")
        return JobRecord.from_item(item) if item else None

    def get_owned(self, job_id: str, *, tenant_id: str, agent_id: str, turn_id: str) -> JobRecord:
        """The job, only for its own tenant, agent and turn; JobNotFound otherwise (same answer)."""
        record = self.get(job_id)
        if record is None or (record.tenant_id, record.agent_id, record.turn_id) != (
            tenant_id,
            agent_id,
            turn_id,
        ):
            raise JobNotFound(job_id)
        return record

    def turn_jobs(self, tenant_id: str, turn_id: str) -> TurnJobs:
        try:
            out = self.ddb.get_item(
                TableName=self.table,
                Key=n.JOBS.key(turn_key(tenant_id, turn_id)),
                ConsistentRead=True,
            )
        except Exception as exc:  # noqa: BLE001
            raise JobStoreUnavailable(type(exc).__name__) from None
        item = out.get("Item") or {}
        return TurnJobs(
            running=int(item.get("running", {}).get("N", "0")),
            open_jobs=tuple(sorted(item.get("open_jobs", {}).get("SS", []))),
        )

    def list_jobs(self, *, tenant_id: str | None = None, limit: int = 50) -> list[JobRecord]:
        """Newest first: one tenant's jobs (by_tenant index), or every job (a scan, operators only)."""
        try:
            if tenant_id is not None:
                pages = self.ddb.get_paginator("query").paginate(
                    TableName=self.table,
                    IndexName=n.JOBS_BY_TENANT.name,
                    ScanIndexForward=False,
                    KeyConditionExpression="tenant_id = :t",
                    ExpressionAttributeValues={":t": {"S": tenant_id}},
                )
            else:
                pages = self.ddb.get_paginator("scan").paginate(
                    TableName=self.table,
                    FilterExpression="begins_with(job_key, :p)",
                    ExpressionAttributeValues={":p": {"S": n.JOB_KEY_PREFIX}},
                )
            records = [JobRecord.from_item(item) for page in pages for item in page.get("Items", [])]
        except Exception as exc:  # noqa: BLE001
            raise JobStoreUnavailable(type(exc).__name__) from None
        records.sort(key=lambda r: r.submitted_ms, reverse=True)
        return records[:limit]

    def open_jobs(self, *, limit: int = 500) -> list[JobRecord]:
        """Jobs not yet final (running or finishing), earliest deadline first (sparse by_open index)."""
        try:
            pages = self.ddb.get_paginator("query").paginate(
                TableName=self.table,
                IndexName=n.JOBS_BY_OPEN.name,
                KeyConditionExpression="#o = :o",
                ExpressionAttributeNames={"#o": n.JOB_ATTR_OPEN},
                ExpressionAttributeValues={":o": {"S": n.JOB_OPEN_SHARD}},
            )
            found: list[JobRecord] = []
            for page in pages:
                found += [JobRecord.from_item(item) for item in page.get("Items", [])]
                if len(found) >= limit:
                    break
        except Exception as exc:  # noqa: BLE001
            raise JobStoreUnavailable(type(exc).__name__) from None
        return found[:limit]

    def busy_sessions(self) -> set[str]:
        """Session ids that still have a job not yet final: the session reaper must leave them
        alone even if their turn ended (job_end stops them when their last job ends)."""
        return {r.session_id for r in self.open_jobs(limit=10_000) if r.session_id}

    # --- end ----------------------------------------------------------------------------------
    def claim_end(self, record: JobRecord, *, final_state: str, outcome: dict[str, Any]) -> JobRecord:
        """Record the job's end, once: running → finishing with `outcome`, slot freed.

        Returns the record as stored after the call — this caller's outcome if it won, the first
        observer's outcome if someone else already claimed the end."""
        if final_state not in FINAL_STATES:
            raise ValueError(f"not a final job state: {final_state!r}")
        ended_ms = int(self.clock() * 1000)
        try:
            self.ddb.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": n.JOBS.key(job_key(record.job_id)),
                            "UpdateExpression": (
                                "SET #s = :finishing, final_state = :f, outcome = :o, ended_ms = :e"
                            ),
                            "ConditionExpression": "#s = :running",
                            "ExpressionAttributeNames": {"#s": "state"},
                            "ExpressionAttributeValues": {
                                ":finishing": {"S": FINISHING},
                                ":running": {"S": RUNNING},
                                ":f": {"S": final_state},
                                ":o": {"B": _compress(outcome)},
                                ":e": {"N": str(ended_ms)},
                            },
                        }
                    },
                    self._free_slot(record),
                ]
            )
        except ClientError as exc:
            if (
                _code(exc) != "TransactionCanceledException"
                or "ConditionalCheckFailed" not in _reasons(exc)[:1]
            ):
                raise JobStoreUnavailable(_code(exc)) from None
        except Exception as exc:  # noqa: BLE001
            raise JobStoreUnavailable(type(exc).__name__) from None
        stored = self.get(record.job_id)
        if stored is None:
            raise JobStoreUnavailable("job_vanished")
        return stored

    def mark_final(self, record: JobRecord) -> None:
        """finishing → its final state, and out of the by_open index. Idempotent."""
        if record.final_state is None:
            raise ValueError("job has no final state yet")
        try:
            self.ddb.update_item(
                TableName=self.table,
                Key=n.JOBS.key(job_key(record.job_id)),
                UpdateExpression="SET #s = :f REMOVE #o",
                ConditionExpression="#s = :finishing",
                ExpressionAttributeNames={"#s": "state", "#o": n.JOB_ATTR_OPEN},
                ExpressionAttributeValues={":f": {"S": record.final_state}, ":finishing": {"S": FINISHING}},
            )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise JobStoreUnavailable(_code(exc)) from None
        except Exception as exc:  # noqa: BLE001
            raise JobStoreUnavailable(type(exc).__name__) from None

    def _free_slot(self, record: JobRecord) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self.table,
                "Key": n.JOBS.key(turn_key(record.tenant_id, record.turn_id)),
                "UpdateExpression": "SET #r = #r - :one DELETE open_jobs :ids",
                "ConditionExpression": "#r > :zero",
                "ExpressionAttributeNames": {"#r": "running"},
                "ExpressionAttributeValues": {
                    ":one": {"N": "1"},
                    ":zero": {"N": "0"},
                    ":ids": {"SS": [record.job_id]},
                },
            }
        }
