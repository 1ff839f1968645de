"""Builds the CDK app of one stage: the core stack, the tenant shard stacks and cdk-nag.

`app.py` (the CDK CLI entry point) and the tests share this, so what the tests synthesize is
what `cdk synth -c stage=NAME` synthesizes. No STS, git or user lookups happen here: the same
config gives byte-identical templates.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks
from sandbox_common import naming as n

from infra.cdk.config import ConfigError, StageConfig, build_config
from infra.cdk.constructs.compute import log_retention
from infra.cdk.layer_build import REPO_ROOT
from infra.cdk.stacks.core import CoreStack
from infra.cdk.stacks.tenants import TenantShardStack

CDK_JSON = REPO_ROOT / "cdk.json"
# Fast, offline synth for tests and tooling: no layer bundling (no pip), no asset copies.
OFFLINE_CONTEXT: dict[str, Any] = {"aws:cdk:bundling-stacks": [], "aws:cdk:disable-asset-staging": True}
STACK_RESOURCE_LIMIT = 450


def cdk_json_context() -> dict[str, Any]:
    """cdk.json's context: the CLI passes it to App(), a plain App() in pytest does not."""
    return dict(json.loads(CDK_JSON.read_text()).get("context", {}))


def compose(app: cdk.App, config: StageConfig) -> dict[str, cdk.Stack]:
    """Add every stack of the stage to `app` (with cdk-nag); returns stack name -> stack."""
    log_retention(config.log_retention_days)  # fail fast, before any construct exists
    env = cdk.Environment(account=config.account, region=config.region)
    tags = {"thinkwork:project": n.PROJECT, "thinkwork:stage": config.name}
    core_name = n.stack_name(config.name, "Core")
    core = CoreStack(
        app,
        core_name,
        config=config,
        env=env,
        tags=tags,
        description=f"Thinkwork sandbox core ({config.name})",
    )
    stacks: dict[str, cdk.Stack] = {core_name: core}
    for index, tenants in config.shards():
        name = n.shard_stack_name(config.name, index)
        shard = TenantShardStack(
            app,
            name,
            config=config,
            tenants=tenants,
            env=env,
            tags=tags,
            description=f"Thinkwork sandbox tenants shard {index} ({config.name})",
        )
        # Runner roles trust the dispatch role by ARN and alarms publish to the core topic: IAM
        # and SNS need both to exist first. Order only; no export couples the stacks.
        shard.add_stack_dependency(core)
        stacks[name] = shard
    for name, stack in stacks.items():
        _check_resource_count(name, stack)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stacks


def _check_resource_count(name: str, stack: cdk.Stack) -> None:
    """No stack over 450 resources (CloudFormation refuses 500 at deploy, too late)."""
    count = sum(1 for c in stack.node.find_all() if isinstance(c, cdk.CfnResource))
    if count > STACK_RESOURCE_LIMIT:
        raise ConfigError(
            f"stack {name} would have {count} resources (over {STACK_RESOURCE_LIMIT}): "
            "lower tenants_per_shard (tenants with more environments cost more resources each)"
        )


def build_app(
    stage: str,
    *,
    overrides: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
    outdir: str | None = None,
) -> cdk.App:
    """A composed (not yet synthesized) app; unknown stage / bad config -> ConfigError."""
    config = build_config(stage, overrides)
    app = cdk.App(context={**cdk_json_context(), **(context or {}), "stage": stage}, outdir=outdir)
    compose(app, config)
    return app


def synth_stage(
    stage: str, *, overrides: dict[str, Any] | None = None, context: dict[str, Any] | None = None
) -> dict[str, dict[str, Any]]:
    """Synthesize one stage offline; stack name -> template dict. cdk-nag findings raise."""
    with tempfile.TemporaryDirectory(prefix="sandbox-synth-") as outdir:
        app = build_app(
            stage, overrides=overrides, context={**OFFLINE_CONTEXT, **(context or {})}, outdir=outdir
        )
        assembly = app.synth()
        return {
            stack.stack_name: json.loads(Path(stack.template_full_path).read_text())
            for stack in assembly.stacks
        }
