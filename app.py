#!/usr/bin/env python3
"""CDK entry point: `npx cdk synth -c stage=NAME` (cdk.json runs this with the project's venv)."""

from __future__ import annotations

import sys

import aws_cdk as cdk

from infra.cdk.app_factory import compose
from infra.cdk.config import STAGES, ConfigError, build_config


def main() -> int:
    app = cdk.App()
    stage = app.node.try_get_context("stage")
    if not stage:
        print(
            f"missing stage: pass -c stage=NAME; known stages: {', '.join(sorted(STAGES))}", file=sys.stderr
        )
        return 2
    # `-c tenants_file=PATH` deploys the stage with tenants kept elsewhere (docs/tenants.md).
    tenants_file = app.node.try_get_context("tenants_file")
    try:
        config = build_config(str(stage), {"tenants_file": str(tenants_file)} if tenants_file else None)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    compose(app, config)
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
