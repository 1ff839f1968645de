"""The whole execute_code path with real parts: moto's server (DynamoDB, SSM, SQS, STS, IAM),
the local AgentCore interpreter (real sessions under bubblewrap), the quota Lambda running in
the local Lambda emulator (a worker process with its CDK environment), and the dispatch handler
in-process with its CDK environment — so tests can count its AWS calls and inspect its logs.

Shared by tests/integration/dispatch and tests/reliability (import the fixtures from here).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from sandbox_common import aws, dimensions
from sandbox_common import naming as n

from infra.cdk.config import build_config
from infra.cdk.function_env import function_environment
from infra.local.interpreter import LocalInterpreterServer
from infra.local.interpreter.egress import session_endpoints
from infra.local.lambda_emulator import FunctionSpec, LambdaEmulator
from infra.local.resources import create_resources, data_grants
from infra.local.stack import lambda_function_specs
from infra.local.state import LocalResources
from tests.conftest import LambdaContext, free_port
from tests.support.moto_snapshot import MotoSnapshot

# Where allowlist sessions see the egress proxy, as the local stack tells dispatch and the reaper
# (their sessions start once a test attaches the real proxy: tests/support/egress_proxy.py).
LOCAL_EGRESS = session_endpoints(n.LOCAL_PACKAGE_INDEX_URL)


@pytest.fixture(scope="session")
def interpreter() -> Iterator[LocalInterpreterServer]:
    server = LocalInterpreterServer().start()
    yield server
    server.stop()


@dataclass
class Stack:
    resources: LocalResources
    interpreter: LocalInterpreterServer
    emulator: LambdaEmulator
    moto: str

    def dispatch(self, event: dict[str, Any] | str) -> dict[str, Any]:
        from dispatch.handler import handler

        return handler(event, LambdaContext(function_name=self.resources.functions[n.DISPATCH]))

    def audit_rows(self, tenant_id: str | None = None) -> list[dict[str, Any]]:
        from sandbox_common.audit import from_item

        items = aws.client("dynamodb").scan(TableName=self.resources.tables[n.INVOCATIONS.logical])["Items"]
        rows = [from_item(i) for i in items]
        return [r for r in rows if tenant_id is None or r["tenant_id"] == tenant_id]

    def counter_items(self) -> dict[str, list[dict[str, Any]]]:
        """The counter items of both windows (the quota's "counted" markers are in `markers()`)."""
        ddb = aws.client("dynamodb")
        return {
            spec.logical: [
                i
                for i in ddb.scan(TableName=self.resources.tables[spec.logical])["Items"]
                if not i[spec.pk]["S"].startswith((n.QUOTA_MARKER_PREFIX, n.QUOTA_BREAKER_PREFIX))
            ]
            for spec in (n.TENANT_DAILY_COUNTERS, n.AGENT_HOURLY_COUNTERS)
        }

    def markers(self) -> list[str]:
        """Keys of the quota's "counted" markers (tenant#call_id)."""
        spec = n.TENANT_DAILY_COUNTERS
        items = aws.client("dynamodb").scan(TableName=self.resources.tables[spec.logical])["Items"]
        return sorted(
            i[spec.pk]["S"].removeprefix(n.QUOTA_MARKER_PREFIX)
            for i in items
            if i[spec.pk]["S"].startswith(n.QUOTA_MARKER_PREFIX)
        )

    def live_sessions(self) -> list[str]:
        """Ids of sessions the local interpreter still runs (READY), over every interpreter."""
        manager = self.interpreter.manager
        return sorted(
            s.session_id
            for spec in self.resources.interpreters
            for s in manager.list(spec["id"], status="READY")
        )

    def set_cap(self, dimension: str, value: int | str, tenant_id: str | None = None) -> None:
        aws.client("ssm").put_parameter(
            Name=dimensions.parameter("local", dimension, tenant_id),
            Value=str(value),
            Type="String",
            Overwrite=True,
        )
        # Fresh quota containers (same endpoint): no cap cached from earlier calls.
        self.restart_quota()

    def restart_quota(self, aws_endpoint: str | None = None) -> None:
        """Fresh quota-Lambda containers on the same Lambda endpoint; `aws_endpoint` (default
        moto) is where they send their DynamoDB/SSM calls — e.g. a fault-injecting proxy."""
        self.emulator = _emulator(self.resources, aws_endpoint or self.moto, self.interpreter)


# The kill switch, one way per row: a call cap at 0 (a tenant's override, or the
# stage-wide value) or the tenant disabled by its operator policy item.
KILLS = ("tenant_daily_override", "agent_hourly_global", "tenant_disabled")


def kill(stack: Stack, how: str, tenant_id: str = "acme") -> None:
    """Throw the kill switch for `tenant_id` as an operator does (`sandboxctl caps set ... 0`,
    `sandboxctl tenants disable`): the SSM cap or the TENANTS policy item."""
    if how == "tenant_daily_override":
        stack.set_cap(dimensions.TENANT_DAILY.name, 0, tenant_id)
    elif how == "agent_hourly_global":
        stack.set_cap(dimensions.AGENT_HOURLY.name, 0)
    elif how == "tenant_disabled":
        aws.client("dynamodb").put_item(
            TableName=stack.resources.tables[n.TENANTS.logical],
            Item={
                n.TENANTS.pk: {"S": tenant_id},
                n.TENANTS.sk: {"S": n.TENANT_POLICY_ITEM},
                "sandbox_enabled": {"BOOL": False},
            },
        )
    else:
        raise ValueError(how)


def put_tools_template(
    stack: Stack, template_id: str, tools: Collection[str], tenant_id: str = "acme"
) -> None:
    """A template whose code may call `tools` (what `sandboxctl template put TENANT TEMPLATE
    --environment default-public --tools ...` writes)."""
    aws.client("dynamodb").put_item(
        TableName=stack.resources.tables[n.TENANTS.logical],
        Item={
            n.TENANTS.pk: {"S": tenant_id},
            n.TENANTS.sort_key: {"S": n.TEMPLATE_ITEM_PREFIX + template_id},
            "environment": {"S": "default-public"},
            n.TEMPLATE_TOOLS_ATTRIBUTE: {"L": [{"S": t} for t in tools]},
        },
    )


def lambda_env(*, aws_endpoint: str, interpreter_endpoint: str, lambda_endpoint: str) -> dict[str, str]:
    """The endpoints and credentials a Lambda worker of the local stack gets (besides its CDK
    environment): AWS (moto, or a proxy in front of it), the interpreter, the Lambda API."""
    return {
        "AWS_ENDPOINT_URL": aws_endpoint,
        "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE": interpreter_endpoint,
        "AWS_ENDPOINT_URL_LAMBDA": lambda_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def function_specs(
    resources: LocalResources,
    functions: Collection[str],
    *,
    aws_endpoint: str,
    interpreter_endpoint: str,
    lambda_endpoint: str,
    **spec_overrides: Any,
) -> list[FunctionSpec]:
    """`functions` (physical names) with their CDK environments and the local endpoints;
    `spec_overrides` change every function's spec (e.g. timeout_seconds, max_concurrency)."""
    env = lambda_env(
        aws_endpoint=aws_endpoint, interpreter_endpoint=interpreter_endpoint, lambda_endpoint=lambda_endpoint
    )
    return [
        FunctionSpec.from_dict({**s, **spec_overrides})
        for s in lambda_function_specs(build_config("local"), resources, env, egress=LOCAL_EGRESS)
        if s["name"] in functions
    ]


def start_emulator(
    resources: LocalResources,
    functions: Collection[str],
    *,
    aws_endpoint: str,
    interpreter_endpoint: str,
    lambda_endpoint: str | None = None,
    **spec_overrides: Any,
) -> LambdaEmulator:
    """A Lambda emulator running `functions` (see function_specs); its own endpoint is their Lambda
    API unless `lambda_endpoint` names another."""
    port = free_port()
    specs = function_specs(
        resources,
        functions,
        aws_endpoint=aws_endpoint,
        interpreter_endpoint=interpreter_endpoint,
        lambda_endpoint=lambda_endpoint or f"http://127.0.0.1:{port}",
        **spec_overrides,
    )
    return LambdaEmulator(specs, port=port).start()


_stack_emulator: LambdaEmulator | None = None  # one per test process, kept on its port


def _emulator(resources: LocalResources, moto: str, interpreter: LocalInterpreterServer) -> LambdaEmulator:
    """The stacks' emulator of this process, now serving fresh pools (no warm container, no cached
    cap) of the quota Lambda (dispatch in-process calls it) and dispatch (the reaper's paused-calls
    hook invokes it); a function's workers start only when it is first invoked. It stays on one
    endpoint, so the functions' environments are the same from test to test and their workers
    come from the same fork servers (lambda_emulator)."""
    global _stack_emulator
    if _stack_emulator is None:
        _stack_emulator = LambdaEmulator([], port=free_port()).start()
    emulated = (resources.functions[n.QUOTA_CHECK], resources.functions[n.DISPATCH])
    _stack_emulator.replace_functions(
        function_specs(
            resources,
            emulated,
            aws_endpoint=moto,
            interpreter_endpoint=interpreter.endpoint,
            lambda_endpoint=_stack_emulator.endpoint,
        )
    )
    return _stack_emulator


@contextmanager
def dispatch_workers(
    stack: Stack, *, aws_endpoint: str | None = None, **spec_overrides: Any
) -> Iterator[Workers]:
    """Dispatch as Lambda worker processes of an emulator of their own (CDK environment), their AWS
    calls to `aws_endpoint` (default moto; e.g. a proxy in front of it), the quota Lambda the
    stack's; `spec_overrides` as for start_emulator."""
    name = stack.resources.functions[n.DISPATCH]
    emulator = start_emulator(
        stack.resources,
        (name,),
        aws_endpoint=aws_endpoint or stack.moto,
        interpreter_endpoint=stack.interpreter.endpoint,
        lambda_endpoint=stack.emulator.endpoint,
        **spec_overrides,
    )
    client = boto3.client(
        "lambda",
        endpoint_url=emulator.endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    try:
        yield Workers(stack, client, name)
    finally:
        emulator.stop()


@dataclass
class Workers:
    """Dispatch's worker processes: invoke them with `client` (function `name`)."""

    stack: Stack
    client: Any
    name: str


# The services create_resources writes to (tests/support/moto_snapshot.py copies their state).
STAGE_SERVICES = ("dynamodb", "ssm", "iam", "sqs", "sns", "logs", "s3")
_stage_snapshots: dict[str, tuple[LocalResources, MotoSnapshot]] = {}  # moto endpoint -> taken once


def stage_resources(moto_endpoint: str) -> LocalResources:
    """The `local` stage's resources in the just-reset moto server of this process: created the
    first time, then restored from the snapshot taken right after (same state, ~80 calls fewer)."""
    if moto_endpoint in _stage_snapshots:
        resources, snapshot = _stage_snapshots[moto_endpoint]
        snapshot.restore()
        return resources
    resources = create_resources(build_config("local"), aws.client)
    _stage_snapshots[moto_endpoint] = (resources, MotoSnapshot.take(STAGE_SERVICES))
    return resources


def open_stack(
    moto_endpoint: str, interpreter: LocalInterpreterServer, setenv: Callable[[str, str], None]
) -> Stack:
    """Create the stage's resources in moto, start the emulator (quota Lambda, dispatch) and point this
    process (dispatch in-process) at all of it through `setenv`."""
    resources = stage_resources(moto_endpoint)
    grants = data_grants(build_config("local"), moto_endpoint)
    for spec in resources.interpreters:
        interpreter.register_interpreter(spec["id"], spec["network_mode"], grants.get(spec["id"]))
    emulator = _emulator(resources, moto_endpoint, interpreter)
    stack = Stack(resources, interpreter, emulator, moto_endpoint)
    apply_dispatch_env(stack, setenv)
    return stack


def apply_dispatch_env(stack: Stack, setenv: Callable[[str, str], None]) -> None:
    """Dispatch's CDK environment + local endpoints, and a fresh container (no cached state)."""
    from dispatch import parts as dependencies
    from dispatch.quota import client as quota_client
    from sandbox_common import settings
    from sandbox_runtime.runner import clear_cache

    env = function_environment(
        build_config("local"),
        n.DISPATCH,
        tables=stack.resources.tables,
        quota_function_name=stack.resources.functions[n.QUOTA_CHECK],
        audit_dlq_url=stack.resources.audit_dlq_url,
        artifacts_bucket=stack.resources.artifacts_bucket,
        egress=LOCAL_EGRESS,
    )
    for key, value in env.items():
        setenv(key, value)
    setenv("AWS_ENDPOINT_URL", stack.moto)
    setenv("AWS_ENDPOINT_URL_BEDROCK_AGENTCORE", stack.interpreter.endpoint)
    setenv("AWS_ENDPOINT_URL_LAMBDA", stack.emulator.endpoint)
    settings.clear_caches()
    dependencies.reset()
    clear_cache()
    quota_client.lambda_client.cache_clear()


def apply_reaper_env(stack: Stack, setenv: Callable[[str, str], None]) -> None:
    """The reaper's CDK environment, and a fresh reaper container, in this process."""
    from reaper import service
    from sandbox_common import settings

    env = function_environment(
        build_config("local"),
        n.REAPER,
        tables=stack.resources.tables,
        artifacts_bucket=stack.resources.artifacts_bucket,
        egress=LOCAL_EGRESS,
    )
    for key, value in env.items():
        setenv(key, value)
    settings.clear_caches()
    service.reset()


def close_stack(stack: Stack) -> None:
    from dispatch import parts as dependencies
    from dispatch.quota import client as quota_client
    from sandbox_runtime.runner import clear_cache

    stack.emulator.replace_functions([])
    # The interpreter serves every test of this process (at most 64 live sessions): the sessions a
    # test's turns left open would otherwise live out their 900 s and refuse a later test's start.
    manager = stack.interpreter.manager
    for session_id in stack.live_sessions():
        for spec in stack.resources.interpreters:
            with contextlib.suppress(Exception):
                manager.stop(spec["id"], session_id)
    dependencies.reset()
    clear_cache()
    quota_client.lambda_client.cache_clear()


@pytest.fixture
def stack(
    moto_endpoint: str, interpreter: LocalInterpreterServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Stack]:
    stack = open_stack(moto_endpoint, interpreter, monkeypatch.setenv)
    yield stack
    close_stack(stack)


@pytest.fixture
def reaper_stack(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    """The stack, with this process also holding the reaper's environment (a fresh container)."""
    from reaper import service

    apply_reaper_env(stack, monkeypatch.setenv)
    yield stack
    service.reset()


# Every action of a turn carries its token.
TURN_ACTIONS = ("begin_turn", "execute_code", "end_turn", "resume", "get_job", "cancel_job")


def turn_token_for(tenant_id: str, turn_id: str) -> str:
    """A deterministic valid turn token per (tenant, turn): 43 URL-safe base64 characters."""
    digest = hashlib.sha256(f"{tenant_id}/{turn_id}".encode()).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def get_job_event(turn_id: str, job_id: str, action: str = "get_job") -> dict[str, Any]:
    """A get_job (or cancel_job) of acme's agent-7 in `turn_id`, with the turn's token."""
    return {
        "action": action,
        "tenant_id": "acme",
        "agent_id": "agent-7",
        "turn_id": turn_id,
        "job_id": job_id,
        "turn_token": turn_token_for("acme", turn_id),
    }


def event(action: str = "execute_code", **over: Any) -> dict[str, Any]:
    """A dispatch event; turn actions carry the (tenant, turn)'s deterministic token unless the
    caller passes turn_token=... (None = send none)."""
    base: dict[str, Any] = {
        "tenant_id": "acme",
        "agent_id": "agent-7",
        "template_id": "analyst",
        "turn_id": "turn-1",
    }
    if action == "execute_code":
        base.update(call_id="call-1", code="print(1+1)")
    if action == "end_turn":
        base = {"tenant_id": base["tenant_id"], "turn_id": base["turn_id"]}
    out = {"action": action, **base, **over}
    if action in TURN_ACTIONS and "turn_token" not in over:
        out["turn_token"] = turn_token_for(str(out["tenant_id"]), str(out["turn_id"]))
    if out.get("turn_token", "") is None:
        del out["turn_token"]
    return out


def jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj))
