"""Lazily created, cached boto3 clients (no import-time side effects, so moto can start first).

Endpoints come from boto3's own configuration (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_<SERVICE>),
which is how the local stack points the unmodified clients at moto and the local interpreter.

Every boto3 session of ours comes from `session()`, and its botocore data loader is one per
process. The loader holds botocore's parsed JSON (service models, endpoints, retry rules), which
is the same for every session; without it each new session parses it again, about 0.15 s of CPU
per client.

The function's own clients (`client`, `new_client`) come from one session per process, made
once: a new session registers botocore's ~130 event handlers again, about 17 ms of CPU per
client. boto3 sessions are not thread-safe (its clients are), so every use of that session is
under one lock; credentials, region and endpoint passed to `new_client` belong to that client
alone.
"""

from __future__ import annotations

import threading
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


class SharedSession:
    """One boto3 session that many threads build clients from: made on first use, and used only
    under its lock (boto3 sessions are not thread-safe; the clients they make are)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._session: Any = None

    def _current(self) -> Any:
        if self._session is None:
            self._session = session()
        return self._session

    def client(self, service: str, **kwargs: Any) -> Any:
        """A new client (`kwargs` as for boto3's `Session.client`: config, endpoint_url,
        region_name, credentials; they belong to this client alone)."""
        with self._lock:
            return self._current().client(service, **kwargs)

    @property
    def events(self) -> Any:
        """The session's event hooks, which each client copies when it is built."""
        with self._lock:
            return self._current().events

    def reset(self) -> None:
        """The next client comes from a new session (a test's fresh container)."""
        with self._lock:
            self._session = None


_shared = SharedSession()


def new_client(service: str, **kwargs: Any) -> Any:
    """A new client of the function's own (`kwargs` as for `SharedSession.client`), built from
    the process's one session."""
    return _shared.client(service, **kwargs)


@cache
def client(service: str) -> Any:
    from botocore.config import Config

    return new_client(service, config=Config(retries=dict(RETRY_CONFIG), connect_timeout=3, read_timeout=10))


def clear_clients() -> None:
    """Forget the cached clients and the shared session (a test's fresh container)."""
    client.cache_clear()
    _shared.reset()
