"""`sandboxctl tenant add|remove`: edit a stage's tenants file and say which deploy applies it.

The file is the stage's deployment data (`docs/tenants.md`). An edit is validated as the stage
would be synthesized (the same `build_config`), so a change that synth would refuse is refused
here, names the field and leaves the file as it was. The file is replaced atomically.

A removed tenant keeps its slot as `{"id": ..., "removed": true}`: tenants are sharded into stacks
by position, and a tenant after it moving into another stack would make CloudFormation create
its named resources (interpreters, parameters, alarms) in one stack while the other still holds
them. Adding a tenant id that was removed takes its old slot back.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any

from sandbox_common import naming as n

from infra.cdk.config import (
    STAGES,
    ConfigError,
    StageConfig,
    build_config,
    read_tenants_file,
    tenants_file_path,
)
from infra.sandboxctl.errors import CtlError


@dataclass(frozen=True)
class Change:
    stage: str
    tenant: str
    action: str  # "added" | "restored" | "removed"
    file: str
    stack: str  # the shard stack the change lands in
    apply: str  # the command that applies it

    def as_dict(self) -> dict[str, str]:
        return {
            "stage": self.stage,
            "tenant": self.tenant,
            "action": self.action,
            "file": self.file,
            "stack": self.stack,
            "apply": self.apply,
        }

    def human(self) -> str:
        where = "to" if self.action != "removed" else "from"
        head = f"{self.action} tenant {self.tenant!r} {where} {self.file} (stack {self.stack})"
        return f"{head}\napply: {self.apply}"


def tenant_entry(
    tenant_id: str,
    *,
    environments: list[str],
    templates: dict[str, str | None],
    tier: str,
    data_read: list[str],
    data_write: list[str],
    kms_keys: list[str],
) -> dict[str, Any]:
    """A tenant as the file writes it (fields left at their default are omitted)."""
    entry: dict[str, Any] = {"id": tenant_id, "environments": environments}
    if tier != "standard":
        entry["compliance_tier"] = tier
    if templates:
        entry["templates"] = templates
    data = {k: v for k, v in (("read", data_read), ("write", data_write), ("kms_keys", kms_keys)) if v}
    if data:
        entry["data"] = data
    return entry


def add(stage: str, entry: dict[str, Any], *, file: str | None = None) -> Change:
    path = _file_of(stage, file)
    document = _read(path)
    tenants: list[Any] = document.setdefault("tenants", [])
    action = "added"
    for index, existing in enumerate(tenants):
        if isinstance(existing, dict) and existing.get("id") == entry["id"]:
            if not existing.get("removed"):
                raise CtlError(f"tenant {entry['id']!r} is already in {path} (tenants[{index}])")
            tenants[index] = entry  # its old slot: no other tenant moves
            action = "restored"
            break
    else:
        tenants.append(entry)
    config = _validated(stage, path, document)
    _write(path, document)
    return _change(config, entry["id"], action, path)


def remove(stage: str, tenant_id: str, *, file: str | None = None) -> Change:
    path = _file_of(stage, file)
    document = _read(path)
    tenants: list[Any] = document.get("tenants", [])
    index = next(
        (
            i
            for i, t in enumerate(tenants)
            if isinstance(t, dict) and t.get("id") == tenant_id and not t.get("removed")
        ),
        None,
    )
    if index is None:
        raise CtlError(f"tenant {tenant_id!r} is not in {path}")
    for position, agent in enumerate(document.get("agents", [])):
        if isinstance(agent, dict) and tenant_id in (agent.get("tenants") or []):
            raise CtlError(
                f"agents[{position}] is scoped to {tenant_id!r}: take it out of that scope first ({path})"
            )
    before = _validated(stage, path, _read(path))
    shard = before.shard_of(tenant_id)
    if index == len(tenants) - 1:
        tenants.pop()  # the last slot: nobody after it can move
        while tenants and isinstance(tenants[-1], dict) and tenants[-1].get("removed"):
            tenants.pop()
    else:
        tenants[index] = {"id": tenant_id, "removed": True}
    _validated(stage, path, document)
    _write(path, document)
    stack = n.shard_stack_name(stage, shard)
    emptied = [t.id for t in dict(before.shards())[shard]] == [tenant_id]
    if stage == "local":
        apply = _LOCAL_APPLY
    elif emptied:  # a shard stack with no tenant left is no longer part of the app: destroy it
        apply = f"npx cdk destroy -c stage={stage} {stack}"
    else:
        apply = f"npx cdk deploy -c stage={stage} {stack}"
    return Change(stage, tenant_id, "removed", path, stack, apply)


_LOCAL_APPLY = "sandboxctl local down && sandboxctl local up  (the local stack reads its tenants at start)"


def _change(config: StageConfig, tenant_id: str, action: str, path: str) -> Change:
    stack = n.shard_stack_name(config.name, config.shard_of(tenant_id))
    apply = _LOCAL_APPLY if config.name == "local" else f"npx cdk deploy -c stage={config.name} {stack}"
    return Change(config.name, tenant_id, action, path, stack, apply)


def _file_of(stage: str, file: str | None) -> str:
    if stage not in STAGES:
        raise CtlError(f"unknown stage {stage!r}; known stages: {', '.join(sorted(STAGES))}")
    path = file or STAGES[stage].get("tenants_file")
    if not path:
        raise CtlError(f"stage {stage!r} names no tenants file")
    return str(path)


def _read(path: str) -> dict[str, Any]:
    try:
        return read_tenants_file(path)
    except ConfigError as exc:
        raise CtlError(f"tenants file {path}: {exc}") from None


def _validated(stage: str, path: str, document: dict[str, Any]) -> StageConfig:
    try:
        return build_config(stage, {"tenants_file": path}, document=document)
    except ConfigError as exc:
        raise CtlError(f"refused, {path} is unchanged: {exc}") from None


def _write(path: str, document: dict[str, Any]) -> None:
    target = tenants_file_path(path)
    text = json.dumps(document, indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=".tenants-", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, target)  # complete or not at all
    except BaseException:
        os.unlink(tmp)
        raise
