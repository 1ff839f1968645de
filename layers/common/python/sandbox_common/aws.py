"""Lazily created, cached boto3 clients (no import-time side effects, so moto can start first).

Endpoints come from boto3's own configuration (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_<SERVICE>),
which is how the local stack points the unmodified clients at moto and the local interpreter.
"""

from __future__ import annotations

from functools import cache
from typing import Any

RETRY_CONFIG = {"mode": "standard", "max_attempts": 3}
# For calls that must never be sent twice (they count, run code, or are someone else's to
# retry). Careful: botocore's `max_attempts` counts *retries*; only `total_max_attempts` counts
# attempts, so this is the one spelling of "exactly one attempt" in the project.
SINGLE_ATTEMPT = {"mode": "standard", "total_max_attempts": 1}


@cache
def client(service: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        service, config=Config(retries=dict(RETRY_CONFIG), connect_timeout=3, read_timeout=10)
    )


def clear_clients() -> None:
    client.cache_clear()
