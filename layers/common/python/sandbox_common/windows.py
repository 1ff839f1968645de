"""UTC circuit-breaker windows. One clock read per call feeds every key and `resets_at`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

FAIL_CLOSED_RETRY_SECONDS = 60


def iso_z(moment: datetime) -> str:
    """ISO-8601 UTC with a `Z` suffix and second precision, e.g. 2026-11-21T00:00:00Z."""
    return moment.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_z_ms(moment: datetime) -> str:
    """ISO-8601 UTC with milliseconds (audit timestamps sort and are precise)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class Windows:
    now: datetime
    day: str  # 2026-11-21
    hour: str  # 2026-11-21T08
    day_resets_at: datetime
    hour_resets_at: datetime

    @classmethod
    def at(cls, now: datetime) -> Windows:
        now = now.astimezone(UTC)
        day_start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        hour_start = now.replace(minute=0, second=0, microsecond=0)
        return cls(
            now=now,
            day=day_start.strftime("%Y-%m-%d"),
            hour=hour_start.strftime("%Y-%m-%dT%H"),
            day_resets_at=day_start + timedelta(days=1),
            hour_resets_at=hour_start + timedelta(hours=1),
        )

    def fail_closed_resets_at(self) -> datetime:
        return self.now + timedelta(seconds=FAIL_CLOSED_RETRY_SECONDS)


def utc_now() -> datetime:
    """The single clock; tests freeze it by patching this function."""
    return datetime.now(UTC)
