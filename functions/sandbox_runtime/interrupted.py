"""Exactly one audit row when dispatch dies mid-call: `dispatch_interrupted`.

The idempotency claim of an execute_code (one PutItem, see `dispatch.idempotency.store`) carries the
call's audit identity (`sandbox_common.attempts`) and the keys of the sparse `by_open_attempt` index: a
call claimed and not yet finished is listed there, ordered by its in-progress deadline (the
moment the Lambda runtime kills the attempt). The normal completion (`save_success`) takes the
record out of the index in the same UpdateItem that stores the answer.

A background submit is one call under one invocation id: the attempt's, which is also its job's
(`job_store.job_id_for`) and its row's. A finisher of a submit whose job was created and bound to
its session stores the submit's answer (the job id) and writes no row: the job's end writes the
call's one row.

A call whose dispatch died stays INPROGRESS past its deadline. Whoever comes first finishes it:
- the first retry with the same tenant + call_id after the deadline (`IdempotentCalls.run_once`),
  which answers the agent with the same error the row carries;
- the reaper's sweep (`reaper.interrupted_sweep`) when no retry comes.
`InterruptedCalls.finish` is the one path both take: one conditional UpdateItem
(INPROGRESS and past its deadline → COMPLETED with the interrupted answer stored) that exactly one
writer wins; the winner then writes the row (a conditional PutItem on the attempt's invocation
id, the same id the original would have used) and takes the record out of the index. A finisher
killed between those steps leaves the record COMPLETED but still in the index: the next sweep
writes the row from the stored answer (the PutItem's condition makes a repeat a no-op).

The invariant against a slow original: the original's row and the interrupted row share one
invocation id, and both the original's completion (`status = INPROGRESS`) and the transition are
conditional on the same record, so one of them wins and the other loses cleanly (no second row,
no second answer). The transition is only allowed after the deadline, when the runtime has
killed the original anyway.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sandbox_common import audit, messages
from sandbox_common import naming as n
from sandbox_common.attempts import IDENTITY_FIELDS, deadline_key
from sandbox_common.errors import SandboxError
from sandbox_common.models import ExecuteCodeRequest
from sandbox_common.observability import logger
from sandbox_common.outcome import Outcome
from sandbox_common.windows import iso_z_ms

from .stored_answer import stored_form

# Powertools' DynamoDB persistence layer attribute names and statuses (its defaults).
ATTR_ID, ATTR_STATUS, ATTR_DATA = "id", "status", "data"
ATTR_IN_PROGRESS_EXPIRY = "in_progress_expiration"
# When the transition happened (ISO): a recovering sweep rebuilds the same row from it.
ATTR_FINISHED_AT = "attempt_finished_at"
STATUS_INPROGRESS, STATUS_COMPLETED = "INPROGRESS", "COMPLETED"
# The stand-in code of a rebuilt request (the row's executed_code_hash is the stored one).
_PLACEHOLDER_CODE = "pass"


def interrupted_outcome(attempt: dict[str, Any], finished_at: datetime) -> Outcome:
    """The one outcome of an interrupted call: the agent's answer and the row come from it."""
    request = ExecuteCodeRequest.model_validate(
        {
            "action": n.Action.EXECUTE_CODE,
            "code": _PLACEHOLDER_CODE,
            **{k: attempt[k] for k in IDENTITY_FIELDS if k in attempt},
        }
    )
    started = _parse_iso(str(attempt["started_at"]))
    outcome = Outcome(
        request=request,
        invocation_id=str(attempt["invocation_id"]),
        started_at=started,
        finished_at=max(finished_at, started),
    )
    outcome.fail(SandboxError(messages.DISPATCH_INTERRUPTED, failure_reason=n.REASON_DISPATCH_INTERRUPTED))
    outcome.audit_extra["executed_code_hash"] = attempt["executed_code_hash"]
    return outcome


class InterruptedCalls:
    """Finishes calls whose dispatch died, on the idempotency table (dispatch and the reaper)."""

    def __init__(
        self,
        *,
        table_name: str,
        ddb: Any,
        audit_writer: audit.AuditWriter,
        retention_days: int,
        jobs_table: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`jobs_table`: where a background submit's job is (its id is `job_store.job_id_for` the
        attempt's invocation id)."""
        self.table = table_name
        self.ddb = ddb
        self.audit_writer = audit_writer
        self.retention_days = retention_days
        self.jobs_table = jobs_table
        self.clock = clock

    def _job_answer(self, attempt: dict[str, Any]) -> dict[str, Any] | None:
        """A background submit whose job was created and bound to its session: the submit's answer
        (the job owns the call's one row, written when it ends, under the same invocation id).
        None otherwise."""
        if not attempt.get("background") or not self.jobs_table:
            return None
        # the job store on first use (botocore): only a dead background submit needs it
        from .job_end import running_response
        from .job_store import JobStore, job_id_for

        job = JobStore(table_name=self.jobs_table, ddb=self.ddb).get(
            job_id_for(str(attempt["invocation_id"]))
        )
        # a job never bound to a session never ran: the interrupted row is the call's (the job's
        # own end, much later, writes under the same id: a no-op)
        return None if job is None or not job.session_id else running_response(job)

    def finish(self, record_id: str) -> dict[str, Any] | None:
        """The interrupted answer if this caller won the record's transition, else None (the call
        finished some other way, or another finisher won: the caller replays the stored answer).
        Raises nothing for a lost race; a DynamoDB failure propagates (nothing was written)."""
        # botocore on first use: a cold start must not pay for it (tests/benchmarks/test_cold_import.py)
        from botocore.exceptions import ClientError

        now = datetime.fromtimestamp(self.clock(), tz=UTC)
        key = {ATTR_ID: {"S": record_id}}
        current = self.ddb.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item")
        if not current or n.IDEMPOTENCY_ATTR_ATTEMPT not in current:
            return None
        attempt = json.loads(current[n.IDEMPOTENCY_ATTR_ATTEMPT]["S"])
        outcome = interrupted_outcome(attempt, now).finish()
        job_answer = self._job_answer(attempt)
        response = outcome.response() if job_answer is None else job_answer
        try:
            self.ddb.update_item(
                TableName=self.table,
                Key=key,
                UpdateExpression="SET #s = :done, #d = :data, #fin = :fin",
                ConditionExpression="#s = :inprogress AND #ipe < :now_ms AND #att = :attempt",
                ExpressionAttributeNames={
                    "#s": ATTR_STATUS,
                    "#d": ATTR_DATA,
                    "#ipe": ATTR_IN_PROGRESS_EXPIRY,
                    "#att": n.IDEMPOTENCY_ATTR_ATTEMPT,
                    "#fin": ATTR_FINISHED_AT,
                },
                ExpressionAttributeValues={
                    ":done": {"S": STATUS_COMPLETED},
                    ":inprogress": {"S": STATUS_INPROGRESS},
                    ":data": {"S": json.dumps(stored_form(response), sort_keys=True)},
                    ":now_ms": {"N": str(int(self.clock() * 1000))},
                    ":fin": {"S": iso_z_ms(now)},
                    ":attempt": current[n.IDEMPOTENCY_ATTR_ATTEMPT],
                },
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return None  # completed, not yet due, or another finisher won
            raise
        if job_answer is None:
            self._write_row(record_id, outcome)
        else:  # the job's end writes the call's one row
            self._unlist(record_id)
        return response

    def _unlist(self, record_id: str) -> None:
        self.ddb.update_item(
            TableName=self.table,
            Key={ATTR_ID: {"S": record_id}},
            UpdateExpression="REMOVE #o, #dl",
            ExpressionAttributeNames={"#o": n.IDEMPOTENCY_ATTR_OPEN, "#dl": n.IDEMPOTENCY_ATTR_DEADLINE},
        )

    def _write_row(self, record_id: str, outcome: Outcome) -> str:
        """The row (conditional on its invocation id: a repeat is a no-op), then out of the index.
        The call's log event and metrics go out with the write that landed, not with a repeat."""
        row = outcome.audit_row(self.retention_days)
        written = self.audit_writer.write(row)
        if written != "duplicate":
            outcome.log(row)
            outcome.emit_metrics(lambda: 0.0)
        self._unlist(record_id)
        logger.warning(
            "dispatch_interrupted_finished",
            extra={
                "invocation_id": outcome.invocation_id,
                "tenant_id": outcome.request.tenant_id,
                "audit": written,
            },
        )
        return written

    def due(self, *, limit: int = 200) -> list[dict[str, Any]]:
        """Open attempts whose in-progress deadline has passed, earliest first (sparse index)."""
        now_key = deadline_key(int(self.clock() * 1000))
        out: list[dict[str, Any]] = []
        pages = self.ddb.get_paginator("query").paginate(
            TableName=self.table,
            IndexName=n.IDEMPOTENCY_BY_OPEN_ATTEMPT.name,
            KeyConditionExpression="#o = :o AND #dl < :now",
            ExpressionAttributeNames={"#o": n.IDEMPOTENCY_ATTR_OPEN, "#dl": n.IDEMPOTENCY_ATTR_DEADLINE},
            ExpressionAttributeValues={":o": {"S": n.IDEMPOTENCY_OPEN_VALUE}, ":now": {"S": now_key}},
        )
        for page in pages:
            out.extend(page.get("Items", []))
            if len(out) >= limit:
                break
        return out[:limit]

    def sweep(self, *, until: float | None = None) -> dict[str, int]:
        """Finish every due open attempt: {"finished": n, "recovered": n, "lost": n}. `recovered`
        = a record a killed finisher left COMPLETED in the index (its row is written now, once)."""
        counts = {"finished": 0, "recovered": 0, "lost": 0}
        for item in self.due():
            if until is not None and self.clock() > until:
                break
            record_id = item[ATTR_ID]["S"]
            if item.get(ATTR_STATUS, {}).get("S") == STATUS_COMPLETED:
                attempt = json.loads(item[n.IDEMPOTENCY_ATTR_ATTEMPT]["S"])
                if self._job_answer(attempt) is not None:  # its job writes the call's row
                    self._unlist(record_id)
                else:
                    finished_at = _parse_iso(item[ATTR_FINISHED_AT]["S"])
                    self._write_row(record_id, interrupted_outcome(attempt, finished_at).finish())
                counts["recovered"] += 1
            elif self.finish(record_id) is not None:
                counts["finished"] += 1
            else:
                counts["lost"] += 1
        return counts


def _parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
