"""Dispatch's side of the circuit breaker: a synchronous invoke of `sandbox-quota-check`.

Fail closed (docs/failure-behaviour.md): the quota Lambda unreachable, timing out, erroring or
answering garbage all mean "no" with dimension `unknown` and resets_at = now + 60 s. The invoke
is never retried by botocore (`total_max_attempts=1`; note that `max_attempts` counts *retries*
in botocore): a retry after an ambiguous failure could count the call twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

from pydantic import ValidationError
from sandbox_common import aws, dimensions
from sandbox_common import naming as n
from sandbox_common.aws import SINGLE_ATTEMPT
from sandbox_common.observability import emit_metric, logger
from sandbox_common.quota_contract import (
    QuotaAdmitted,
    QuotaRequest,
    QuotaTenantRefused,
    QuotaTurnGuard,
    QuotaTurnRefused,
    parse_quota_response,
)
from sandbox_common.windows import Windows, iso_z

QUOTA_READ_TIMEOUT_SECONDS = 15


@dataclass(frozen=True)
class QuotaDecision:
    allowed: bool
    dimension: str | None = None
    resets_at: str | None = None
    counts: Mapping[str, int | None] = field(default_factory=dict)  # by dimension, when read back
    already_counted: bool = False  # this call_id was counted before (a retry / duplicate): proceed
    retries: int = 0  # transaction conflicts the quota Lambda retried (visible as the call's retry events)
    turn_refused: bool = False  # the turn guard failed: nothing counted
    turn_exists: bool = True  # with turn_refused: False = no such turn (a first call)
    tenant_disabled: bool = False  # the tenant's policy said disabled inside the transaction: nothing counted
    released: bool = False  # answer to a release: a count was undone

    @property
    def counted_here(self) -> bool:
        """This request added one to the counters (to undo if the call never reaches its run)."""
        return self.allowed and not self.already_counted and not self.released


@lru_cache(maxsize=1)
def lambda_client() -> Any:
    from botocore.config import Config

    return aws.new_client(
        "lambda",
        config=Config(
            retries=dict(SINGLE_ATTEMPT), connect_timeout=3, read_timeout=QUOTA_READ_TIMEOUT_SECONDS
        ),
    )


def _fail_closed(windows: Windows, tenant_id: str, cause: str, *, release: bool = False) -> QuotaDecision:
    if release:  # not a refusal of any call: the count stays (an over-count by one), logged only
        logger.error("quota_release_failed", extra={"cause": cause})
        return QuotaDecision(False, dimensions.UNKNOWN, iso_z(windows.fail_closed_resets_at()))
    # A refusal like any other: counted under SandboxCapExceeded (dimension unknown, and by
    # tenant) so the dashboard and the cap-breach alarms see it, plus the fail-closed metric.
    emit_metric(n.METRIC_QUOTA_FAIL_CLOSED)
    emit_metric(n.METRIC_CAP_EXCEEDED, dimensions={"dimension": dimensions.UNKNOWN})
    emit_metric(n.METRIC_CAP_EXCEEDED, dimensions={"tenant_id": tenant_id})
    logger.error("quota_fail_closed", extra={"cause": cause})
    return QuotaDecision(False, dimensions.UNKNOWN, iso_z(windows.fail_closed_resets_at()))


class CheckQuota(Protocol):
    """`check_quota`'s signature (tests wrap it to watch what dispatch sends)."""

    def __call__(
        self,
        function_name: str,
        tenant_id: str,
        agent_id: str,
        windows: Windows,
        client: Any = None,
        *,
        counts: bool = True,
        call_id: str | None = None,
        turn: QuotaTurnGuard | None = None,
        release: bool = False,
    ) -> QuotaDecision: ...


def check_quota(
    function_name: str,
    tenant_id: str,
    agent_id: str,
    windows: Windows,
    client: Any = None,
    *,
    counts: bool = True,
    call_id: str | None = None,
    turn: QuotaTurnGuard | None = None,
    release: bool = False,
) -> QuotaDecision:
    """`counts=False`: the admission need not report the counts (the quota Lambda then skips its
    read-back, one sequential request less); they come back as None. `call_id`: counted at most
    once per call_id; `turn`: counted only if the turn guard holds (else `turn_refused`);
    `release`: undo `call_id`'s count. See sandbox_common.quota_contract.QuotaRequest."""
    request = QuotaRequest(
        tenant_id=tenant_id, agent_id=agent_id, counts=counts, call_id=call_id, turn=turn, release=release
    )
    try:
        out = (client or lambda_client()).invoke(
            FunctionName=function_name,
            InvocationType="RequestResponse",
            Payload=request.model_dump_json(exclude_defaults=True).encode(),
        )
        if out.get("FunctionError"):
            return _fail_closed(windows, tenant_id, f"function_error:{out['FunctionError']}", release=release)
        answer = parse_quota_response(out["Payload"].read())
    except ValidationError:
        return _fail_closed(windows, tenant_id, "malformed_response", release=release)
    except Exception as exc:  # noqa: BLE001 — unreachable, timeout, throttled: all "no"
        return _fail_closed(windows, tenant_id, type(exc).__name__, release=release)
    if isinstance(answer, QuotaTurnRefused):
        return QuotaDecision(False, turn_refused=True, turn_exists=answer.turn_exists)
    if isinstance(answer, QuotaTenantRefused):
        return QuotaDecision(False, tenant_disabled=True)
    if isinstance(answer, QuotaAdmitted):
        return QuotaDecision(
            True,
            counts={d.name: answer.count(d.name) for d in dimensions.calls()},
            already_counted=answer.already_counted,
            retries=answer.retries,
            released=answer.released,
        )
    return QuotaDecision(False, answer.dimension, answer.resets_at)
