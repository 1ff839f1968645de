"""The interpreters a local interpreter server knows: the built-in one, those registered in code
(each with what its sessions may read of the emulated S3), and those of a registry file the local
stack rewrites while the server runs."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

from infra.local.interpreter import s3relay
from infra.local.interpreter.session import NotFound

log = logging.getLogger("local-interpreter")

NETWORK_MODES = ("PUBLIC", "SANDBOX", "VPC")
# AgentCore's system interpreter, the official SDK's default identifier: built into every local
# interpreter as a PUBLIC one (docs/decisions.md). It is no tenant's interpreter: the local stack
# registers each tenant's own, and nothing may register this name.
DEFAULT_INTERPRETER_ID = "aws.codeinterpreter.v1"
BUILTIN_INTERPRETERS = {DEFAULT_INTERPRETER_ID: "PUBLIC"}


class InterpreterRegistry:
    def __init__(
        self,
        interpreters: dict[str, str] | None = None,
        registry_file: str | os.PathLike[str] | None = None,
        data_grants: dict[str, s3relay.DataGrant] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._interpreters: dict[str, str] = {}
        # interpreter id -> what its sessions may read of the emulated S3 (s3relay.py)
        self._grants: dict[str, s3relay.DataGrant] = dict(data_grants or {})
        self._registry_file = Path(registry_file) if registry_file else None
        self._registry_mtime: float | None = None
        self._file_interpreters: dict[str, str] = {}
        for interpreter_id, mode in (interpreters or {}).items():
            self.register(interpreter_id, mode)
        self._load(strict=True)

    def register(self, interpreter_id: str, network_mode: str, data: s3relay.DataGrant | None = None) -> None:
        """`data`: what its sessions may read of the emulated S3 (s3relay.py)."""
        if network_mode not in NETWORK_MODES:
            raise ValueError(f"network_mode must be one of {NETWORK_MODES}, got {network_mode!r}")
        if not interpreter_id or "/" in interpreter_id:
            raise ValueError(f"invalid interpreter id {interpreter_id!r}")
        if interpreter_id in BUILTIN_INTERPRETERS:
            raise ValueError(f"{interpreter_id} is built in (a PUBLIC interpreter of no tenant)")
        with self._lock:
            self._interpreters[interpreter_id] = network_mode
            if data is not None:
                self._grants[interpreter_id] = data

    def grant(self, interpreter_id: str) -> s3relay.DataGrant | None:
        with self._lock:
            return self._grants.get(interpreter_id)

    def all(self) -> dict[str, str]:
        """interpreter id -> network mode, the registry file read again if it changed."""
        self._load()
        with self._lock:
            return {**self._file_interpreters, **self._interpreters, **BUILTIN_INTERPRETERS}

    def resolve(self, identifier: str) -> tuple[str, str]:
        """(interpreter id, network mode); an ARN ending in `/<id>` names the same interpreter."""
        known = self.all()
        candidate = identifier.rsplit("/", 1)[-1] if identifier.startswith("arn:") else identifier
        if candidate not in known:
            raise NotFound(f"Code interpreter {identifier} not found")
        return candidate, known[candidate]

    def _load(self, strict: bool = False) -> None:
        """The registry file ({"<interpreter id>": "PUBLIC"|"SANDBOX", ...}) is re-read when it
        changes, so the local stack can add interpreters without restarting the server.

        A bad file fails the server's start (strict); a bad *change* is logged and the last good
        registry stays in force, so a half-written file never turns every request into a 500.
        """
        if self._registry_file is None:
            return
        try:
            mtime: float | None = self._registry_file.stat().st_mtime
        except FileNotFoundError:
            mtime = None
        if mtime == self._registry_mtime:
            return
        loaded: dict[str, str] = {}
        try:
            if mtime is not None:
                data = json.loads(self._registry_file.read_text(encoding="utf-8") or "{}")
                if not isinstance(data, dict):
                    raise ValueError(f"{self._registry_file}: expected a JSON object of id -> network mode")
                for interpreter_id, mode in data.items():
                    if mode not in NETWORK_MODES:
                        raise ValueError(
                            f"{self._registry_file}: {interpreter_id!r} has network mode {mode!r}"
                        )
                    loaded[str(interpreter_id)] = mode
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            if strict:
                raise
            log.error("registry %s ignored, keeping the previous one: %s", self._registry_file, exc)
            with self._lock:
                self._registry_mtime = mtime
            return
        with self._lock:
            self._file_interpreters, self._registry_mtime = loaded, mtime
