"""Fixtures for sandbox-quota-check against the real moto server (DynamoDB + SSM)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from sandbox_common import aws, dimensions, naming, settings
from sandbox_common.observability import logger
from sandbox_common.settings import QuotaSettings

STAGE = "qtest"


@pytest.fixture(autouse=True)
def _fresh_cap_reader() -> Iterator[None]:
    from quota_check import caps

    caps.clear_caches()
    yield
    caps.clear_caches()


@dataclass
class QuotaStack:
    """The quota Lambda's world on moto: its two tables, its SSM caps, its env."""

    monkeypatch: pytest.MonkeyPatch
    endpoint: str
    context: Any
    tables: dict[str, str] = field(default_factory=dict)

    def configure(self, *, cache_ttl_seconds: int = 60) -> None:
        env = QuotaSettings(
            stage=STAGE,
            tenant_daily_table=naming.TENANT_DAILY_COUNTERS.physical(STAGE),
            agent_hourly_table=naming.AGENT_HOURLY_COUNTERS.physical(STAGE),
            cache_ttl_seconds=cache_ttl_seconds,
        ).to_env()
        for key, value in env.items():
            self.monkeypatch.setenv(key, value)
        settings.clear_caches()
        from quota_check import caps

        caps.clear_caches()

    def create_tables(self) -> None:
        ddb = aws.client("dynamodb")
        for spec in (naming.TENANT_DAILY_COUNTERS, naming.AGENT_HOURLY_COUNTERS):
            name = spec.physical(STAGE)
            ddb.create_table(
                TableName=name,
                KeySchema=[{"AttributeName": spec.pk, "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": spec.pk, "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
            self.tables[spec.logical] = name

    def set_cap(self, dimension: str, value: str | int, *, tenant: str | None = None) -> None:
        aws.client("ssm").put_parameter(
            Name=dimensions.parameter(STAGE, dimension, tenant),
            Value=str(value),
            Type="String",
            Overwrite=True,
        )

    def delete_cap(self, dimension: str, *, tenant: str | None = None) -> None:
        aws.client("ssm").delete_parameter(Name=dimensions.parameter(STAGE, dimension, tenant))

    def invoke(self, event: Any) -> dict[str, Any]:
        from quota_check.handler import handler

        return handler(event, self.context)

    def call(self, tenant: str = "acme", agent: str = "agent-7") -> dict[str, Any]:
        return self.invoke({"tenant_id": tenant, "agent_id": agent})

    def items(self, spec: naming.TableSpec) -> list[dict[str, Any]]:
        """Counter items and call markers (a tenant's breaker version is no counter: `breakers`)."""
        return [i for i in self._scan(spec) if not i[spec.pk]["S"].startswith(naming.QUOTA_BREAKER_PREFIX)]

    def breakers(self) -> dict[str, int]:
        """tenant -> its breaker version (the caps read time of the latest refusal, epoch ms)."""
        spec = naming.TENANT_DAILY_COUNTERS
        return {
            i[spec.pk]["S"].removeprefix(naming.QUOTA_BREAKER_PREFIX): int(
                i[naming.QUOTA_BREAKER_ATTR_SEEN]["N"]
            )
            for i in self._scan(spec)
            if i[spec.pk]["S"].startswith(naming.QUOTA_BREAKER_PREFIX)
        }

    def _scan(self, spec: naming.TableSpec) -> list[dict[str, Any]]:
        return aws.client("dynamodb").scan(TableName=spec.physical(STAGE), ConsistentRead=True)["Items"]

    def count(self, spec: naming.TableSpec, key: str) -> int | None:
        item = (
            aws.client("dynamodb")
            .get_item(TableName=spec.physical(STAGE), Key={spec.pk: {"S": key}}, ConsistentRead=True)
            .get("Item")
        )
        return None if item is None else int(item[naming.COUNTER_ATTR_COUNT]["N"])


@pytest.fixture
def quota(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, lambda_context: Any) -> QuotaStack:
    """Tables created, default caps (1000/100) in SSM, env set, cap cache TTL 60 s."""
    stack = QuotaStack(monkeypatch=monkeypatch, endpoint=moto_endpoint, context=lambda_context)
    stack.configure()
    stack.create_tables()
    stack.set_cap(dimensions.TENANT_DAILY.name, dimensions.TENANT_DAILY.default)
    stack.set_cap(dimensions.AGENT_HOURLY.name, dimensions.AGENT_HOURLY.default)
    return stack


@pytest.fixture
def freeze(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], datetime]:
    """Freeze the single clock (sandbox_common.windows.utc_now) at an ISO-8601 instant."""
    from sandbox_common import windows

    def _freeze(iso: str) -> datetime:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(UTC)
        monkeypatch.setattr(windows, "utc_now", lambda: moment)
        return moment

    return _freeze


class CapClock:
    """The cap cache's two clocks (the reader's negative cache and Powertools' value cache),
    stopped at the moment the fixture starts and moved only by `advance`."""

    def __init__(self) -> None:
        self.offset = 0.0

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@pytest.fixture
def cap_clock(monkeypatch: pytest.MonkeyPatch) -> CapClock:
    from aws_lambda_powertools.utilities.parameters import base
    from quota_check import caps

    clock = CapClock()
    start_wall, start_mono = datetime.now(), time.monotonic()
    real = base.datetime

    class _Stopped(real):  # type: ignore[valid-type,misc]
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            assert tz is None
            return start_wall + timedelta(seconds=clock.offset)

    monkeypatch.setattr(base, "datetime", _Stopped)
    monkeypatch.setattr(caps, "_clock", lambda: start_mono + clock.offset)
    caps.clear_caches()
    return clock


@pytest.fixture
def instant_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """boto3's standard retries still happen (same attempts), without the jittered sleep."""
    from botocore.retries import standard

    monkeypatch.setattr(standard.ExponentialBackoff, "delay_amount", lambda self, context: 0)


class _Body:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data


@dataclass
class Injection:
    sent: int = 0
    remove: Callable[[], None] = lambda: None


@pytest.fixture
def inject_error() -> Callable[..., Injection]:
    return inject_aws_error


@pytest.fixture
def count_requests() -> Callable[[str, str], Injection]:
    return count_calls


@pytest.fixture
def emf() -> Callable[[list[dict[str, Any]], str], list[dict[str, Any]]]:
    return emf_metrics


def inject_aws_error(
    service: str,
    operation: str,
    code: str,
    *,
    status: int = 400,
    extra: dict[str, Any] | None = None,
    when: Callable[[bytes], bool] | None = None,
) -> Injection:
    """Make the real boto3 client receive an AWS JSON-protocol error for `operation`.

    `when(request_body)` narrows it to some requests. A `before-send` hook answers instead of the
    network, so botocore's parser and retry handler run exactly as they would on a real error
    (throttling codes are retried, then raised).
    """
    injection = Injection()

    def _answer(request: Any, **_: Any) -> AWSResponse | None:
        if when is not None and not when(request.body or b""):
            return None  # not this request: let it reach moto
        injection.sent += 1
        body = json.dumps(
            {"__type": f"com.amazonaws.{service}#{code}", "message": f"injected {code}", **(extra or {})}
        )
        headers = {"x-amzn-RequestId": "injected", "Content-Type": "application/x-amz-json-1.0"}
        return AWSResponse(request.url, status, headers, _Body(body.encode()))

    event = f"before-send.{_service_id(service)}.{operation}"
    aws.client(service).meta.events.register(event, _answer)
    injection.remove = lambda: aws.client(service).meta.events.unregister(event, _answer)
    return injection


def count_calls(service: str, operation: str) -> Injection:
    """Count real requests the client sends for `operation` (passes them through)."""
    counter = Injection()

    def _count(**_: Any) -> None:
        counter.sent += 1

    aws.client(service).meta.events.register(f"before-send.{_service_id(service)}.{operation}", _count)
    return counter


def _service_id(service: str) -> str:
    return aws.client(service).meta.service_model.service_id.hyphenize()


class _CurrentStdout:
    """Writes to whatever sys.stdout is at write time (capsys swaps it in only for the call)."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


@pytest.fixture
def log_lines(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """Every stdout line of the test as parsed JSON (Powertools logs + EMF); fails on non-JSON."""
    handler = logger.registered_handler
    previous = handler.stream  # the Logger bound sys.stdout at import, before capsys existed
    handler.stream = _CurrentStdout()

    def _lines() -> list[dict[str, Any]]:
        out = capsys.readouterr().out
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    yield _lines
    handler.stream = previous


def emf_metrics(lines: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """EMF records carrying metric `name`: [{'dimensions': [...], 'record': {...}}]."""
    found = []
    for line in lines:
        for directive in line.get("_aws", {}).get("CloudWatchMetrics", []):
            if any(metric["Name"] == name for metric in directive["Metrics"]):
                found.append({"dimensions": directive["Dimensions"], "record": line})
    return found
