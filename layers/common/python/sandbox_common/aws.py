"""Lazily created, cached boto3 clients (no import-time side effects, so moto can start first).

Endpoints come from boto3's own configuration (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_<SERVICE>),
which is how the local stack points the unmodified clients at moto and the local interpreter.

Every boto3 session of ours comes from `session()`: a new session (sessions are not thread-safe,
so each caller keeps its own) whose botocore data loader is one per process. The loader holds
botocore's parsed JSON (service models, endpoints, retry rules), which is the same for every
session; without it each new session parses it again, about 0.15 s of CPU per client.
"""

from __future__ import annotations

from functools import cache
from typing import Any

RETRY_CONFIG = {"mode": "standard", "max_attempts": 3}
# For calls that must never be sent twice (they count, run code, or are someone else's to
# retry). Careful: botocore's `max_attempts` counts *retries*; only `total_max_attempts` counts
# attempts, so this is the one spelling of "exactly one attempt" in the project.
SINGLE_ATTEMPT = {"mode": "standard", "total_max_attempts": 1}


class _SearchPaths(list[str]):
    """The shared loader's search paths: every boto3 session appends boto3's own data path to its
    loader; kept once."""

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)


@cache
def shared_data_loader() -> Any:
    """The process's botocore data loader (botocore's and boto3's own read-only data files, each
    parsed once and cached on it)."""
    import botocore.loaders

    return botocore.loaders.Loader(extra_search_paths=_SearchPaths())


def session(**kwargs: Any) -> Any:
    """A new boto3 session (`kwargs` as for boto3.session.Session: credentials, region) that shares
    the process's botocore data loader."""
    import boto3
    import botocore.session

    core = botocore.session.Session()
    if not core.get_config_variable("data_path"):  # AWS_DATA_PATH adds search paths: its own loader
        core.register_component("data_loader", shared_data_loader())
    return boto3.session.Session(botocore_session=core, **kwargs)


@cache
def client(service: str) -> Any:
    from botocore.config import Config

    return session().client(
        service, config=Config(retries=dict(RETRY_CONFIG), connect_timeout=3, read_timeout=10)
    )


def clear_clients() -> None:
    client.cache_clear()
