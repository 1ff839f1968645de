"""Caps from SSM, read through Powertools parameters with a TTL ≤ 60 s.

Resolution per calls dimension (`sandbox_common.dimensions`): the per-tenant override
`/…/caps/tenants/{tenant}/{dim}` wins when it exists, else the global `/…/caps/{dim}`. Paths come
only from `Dimension.parameter`.

What "no doubt" means here (fail closed = raise `CapsUnavailable`):
- a value that is not a non-negative integer is ignored (error log + metric, at most once per
  path per TTL) and the last good value of that path is used; with none, fail closed;
- an unreadable path (throttling after boto3's bounded retries, access denied, endpoint down)
  uses the last known state of that path (a value, or "known absent" for an override); with
  none, fail closed — an override we cannot read might be the tenant's kill switch;
- a missing override is "no override", cached for the TTL like a value (Powertools does not
  cache misses, so we do), so a hot tenant without overrides costs no SSM call per request;
- a missing global with a last good value keeps using it (logged), else fails closed.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Final

from sandbox_common import aws, dimensions, naming
from sandbox_common.observability import emit_metric, logger
from sandbox_common.settings import quota_settings

# Digits only: no sign, no whitespace, no decimal point, no non-ASCII digits (int() would take
# " 10", "+1" and "١٠"). 38 digits is DynamoDB's number precision, so any accepted cap is storable.
_CAP_VALUE_RE: Final = re.compile(r"[0-9]{1,38}")


class _Absent:
    """Sentinel: the parameter does not exist (only meaningful for override paths)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()


class CapsUnavailable(Exception):
    """A cap cannot be known with certainty: the caller must fail closed."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{reason}: {path}")
        self.path = path
        self.reason = reason


class _Unreadable(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Caps(dimensions.Caps):
    """A tenant's call caps, one per calls dimension (`sandbox_common.dimensions.calls()`).
    `read_at_ms`: when the oldest of the values they come from was read from SSM (epoch ms of
    this container's clock; 0 when unknown) — how old this container's view of them is."""

    KIND = dimensions.Kind.CALLS

    def __init__(self, *values: int, read_at_ms: int = 0) -> None:
        super().__init__(*values)
        self.read_at_ms = read_at_ms


def parse_cap(raw: Any) -> int | None:
    """The cap held by a parameter value, or None when it is not a non-negative integer."""
    if isinstance(raw, str) and _CAP_VALUE_RE.fullmatch(raw):
        return int(raw)
    return None


class CapReader:
    """Resolves a tenant's caps. One per container (see `cap_reader()`); state is per path.

    `provider` is a Powertools `SSMProvider` (it owns the value cache, max_age = ttl); this class
    adds what Powertools does not do: the negative cache, last-known state, validation.
    """

    def __init__(
        self,
        *,
        stage: str,
        ttl_seconds: int,
        provider: Any,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stage = stage
        self._ttl = ttl_seconds
        self._provider = provider
        self._clock = clock
        self._lock = threading.Lock()  # Lambda is single-threaded; the local stack is not
        self._absent_until: dict[str, float] = {}
        self._last_known: dict[str, int | _Absent] = {}
        self._invalid_reported_at: dict[str, float] = {}
        # path -> (until when, on self._clock, the value read is fresh; when it was read, epoch ms)
        self._fetched: dict[str, tuple[float, int]] = {}

    def caps_for(self, tenant_id: str) -> Caps:
        """Raises CapsUnavailable when any cap cannot be known (fail closed)."""
        paths: list[str] = []
        values = [self._cap(tenant_id, dimension, paths) for dimension in dimensions.calls()]
        with self._lock:
            read_at = min((self._fetched.get(path, (0.0, 0))[1] for path in paths), default=0)
        return Caps(*values, read_at_ms=read_at)

    def refresh(self, tenant_id: str) -> None:
        """Read the tenant's caps from SSM again at the next `caps_for`, whatever their age (a
        container that refused the tenant on newer caps says this one's are stale)."""
        with self._lock:
            for dimension in dimensions.calls():
                for path in {dimension.parameter(self._stage, tenant_id), dimension.parameter(self._stage)}:
                    self._fetched.pop(path, None)
                    self._absent_until.pop(path, None)

    def _cap(self, tenant_id: str, dimension: dimensions.Dimension, paths: list[str]) -> int:
        if dimension.per_tenant:
            path = dimension.parameter(self._stage, tenant_id)
            paths.append(path)
            override = self._resolve(path, required=False)
            if not isinstance(override, _Absent):
                return override
        paths.append(dimension.parameter(self._stage))
        value = self._resolve(dimension.parameter(self._stage), required=True)
        assert not isinstance(value, _Absent)  # required=True never answers ABSENT
        return value

    def _resolve(self, path: str, *, required: bool) -> int | _Absent:
        try:
            state = self._read(path)
        except _Unreadable as exc:
            return self._fallback(path, f"cap parameter unreadable ({exc.reason})", required=required)
        if state is None:  # present but not a non-negative integer
            return self._fallback(
                path, "cap parameter value is not a non-negative integer", required=required
            )
        if isinstance(state, _Absent) and required:
            return self._fallback(path, "cap parameter missing", required=required)
        with self._lock:
            self._last_known[path] = state
        return state

    def _fallback(self, path: str, reason: str, *, required: bool) -> int | _Absent:
        with self._lock:
            known = self._last_known.get(path)
        if known is None or (required and isinstance(known, _Absent)):
            raise CapsUnavailable(path, reason)
        logger.error(
            "using last known cap value",
            extra={"parameter": path, "reason": reason, "last_known": str(known)},
        )
        return known

    def _read(self, path: str) -> int | _Absent | None:
        """Current state of one path: a cap, ABSENT, or None when the value is malformed."""
        now = self._clock()
        with self._lock:
            if self._absent_until.get(path, 0.0) > now:
                return ABSENT
            # Past its TTL on this reader's clock, a value is fetched for sure (not from Powertools'
            # cache), so its read time below is the time SSM answered.
            fetch = self._fetched.get(path, (0.0, 0))[0] <= now
        read_at = int(time.time() * 1000)
        try:
            raw = self._provider.get(path, max_age=self._ttl, force_fetch=fetch)
        except Exception as exc:  # Powertools wraps every SDK error in GetParameterError
            if _is_parameter_not_found(exc):
                with self._lock:
                    if self._ttl > 0:
                        self._absent_until[path] = now + self._ttl
                    self._fetched[path] = (now + self._ttl, read_at)
                return ABSENT
            raise _Unreadable(_describe(exc)) from exc
        value = parse_cap(raw)
        if fetch:  # a malformed value is not news: the last good one, and its read time, stay
            with self._lock:
                last = self._fetched.get(path, (0.0, 0))[1]
                self._fetched[path] = (now + self._ttl, read_at if value is not None else last)
        if value is None:
            self._report_invalid(path, now)
        return value

    def _report_invalid(self, path: str, now: float) -> None:
        # Powertools serves the same bad string from its cache until the TTL ends: report it once
        # per TTL per path, so the metric counts bad reads, not requests.
        with self._lock:
            last = self._invalid_reported_at.get(path)
            if last is not None and now - last < max(self._ttl, 1):
                return
            self._invalid_reported_at[path] = now
        logger.error("ignoring cap parameter: value is not a non-negative integer", extra={"parameter": path})
        emit_metric(naming.METRIC_CAP_PARAMETER_INVALID)


def _error_code(exc: BaseException) -> str | None:
    # GetParameterError is raised inside the `except` of the SDK call, so the ClientError is its
    # __context__ (Powertools re-raises without `from`); look at both links to be safe.
    for link in (exc, exc.__cause__, exc.__context__):
        response = getattr(link, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            return None if code is None else str(code)
    return None


def _is_parameter_not_found(exc: BaseException) -> bool:
    return _error_code(exc) == "ParameterNotFound"


def _describe(exc: BaseException) -> str:
    code = _error_code(exc)
    if code:
        return code
    inner = exc.__cause__ or exc.__context__ or exc
    return type(inner).__name__


@lru_cache(maxsize=1)
def cap_reader() -> CapReader:
    """The container's reader: built on first use (no import-time clients), reused after."""
    from aws_lambda_powertools.utilities.parameters import SSMProvider

    settings = quota_settings()
    return CapReader(
        stage=settings.stage,
        ttl_seconds=settings.cache_ttl_seconds,
        provider=SSMProvider(boto3_client=aws.client("ssm")),
        clock=_clock,
    )


def _clock() -> float:
    """The negative cache's clock (tests move it with the Powertools cache's clock)."""
    return time.monotonic()


def clear_caches() -> None:
    """Forget every cached cap, miss and last-known value (tests; a fresh container)."""
    cap_reader.cache_clear()
