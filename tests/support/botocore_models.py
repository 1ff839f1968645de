"""One botocore data loader per test process, also for the sessions our code does not make.

Our code makes every boto3 session through `sandbox_common.aws.session`, which shares the
process's data loader (`aws.shared_data_loader`). Sessions made elsewhere in a test process (the
agent client's `boto3.client`, test helpers, moto) would still build a cold loader each, which
parses botocore's service model, `endpoints.json` and the SDK defaults from disk again and lists
every service directory: about 0.15 s of CPU per client. `install()` hands them the same loader.
Lambda emulator workers and CLI subprocesses are separate processes with a loader of their own.
"""

from __future__ import annotations

from typing import Any

import botocore.loaders
import botocore.session
from sandbox_common import aws

_original_create_loader = botocore.loaders.create_loader


def shared_create_loader(search_path_string: str | None = None) -> Any:
    """What a botocore Session builds its loader with: the shared one, unless AWS_DATA_PATH asks
    for other search paths."""
    if search_path_string:
        return _original_create_loader(search_path_string)
    return aws.shared_data_loader()


def install() -> None:
    """Make every botocore Session of this process use the shared loader (idempotent)."""
    botocore.session.create_loader = shared_create_loader  # type: ignore[attr-defined]
