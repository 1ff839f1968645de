"""One botocore data loader per test process, so a fresh boto3 client does not re-read its model.

Every test starts with no cached clients (`sandbox_common.aws.clear_clients`, so a client is always
pointed at the endpoints that test set), and `aws.client` makes each client from a new
`boto3.session.Session` — whose new botocore `Loader` parses the service model, `endpoints.json`
and the SDK defaults from disk again, and lists every service directory. Measured on the shared
local stack (tests/integration/dispatch/test_turn_token.py, one process): 28 % of the file's time
was `json` decoding botocore's data files and 8 % listing its directories, ~0.5 s per client.

The loader only reads botocore's and boto3's own, immutable, data files, and caches what it read
per loader instance; sharing one instance shares that read-only cache. Everything a test relies on
stays per client: endpoints, credentials, retries, event hooks (a `before-send` injection still
sees only its own client). Lambda emulator workers and CLI subprocesses are separate processes and
keep their cold loaders (their cold start is part of what they model).
"""

from __future__ import annotations

from typing import Any

import botocore.loaders
import botocore.session

_original_create_loader = botocore.loaders.create_loader
_loaders: dict[str | None, Any] = {}


class _SearchPaths(list):  # type: ignore[type-arg]
    """boto3 appends its own data directory to the loader's search path on every new Session: on a
    shared loader keep one copy (the path list, hence the lookups, stay the same as one Session's)."""

    def append(self, item: Any) -> None:
        if item not in self:
            super().append(item)


def shared_create_loader(search_path_string: str | None = None) -> Any:
    loader = _loaders.get(search_path_string)
    if loader is None:
        loader = _original_create_loader(search_path_string)
        loader._search_paths = _SearchPaths(loader._search_paths)
        _loaders[search_path_string] = loader
    return loader


def install() -> None:
    """Make every botocore Session of this process use the shared loader (idempotent)."""
    botocore.session.create_loader = shared_create_loader  # type: ignore[attr-defined]
