"""Access to a deployed stage for the opt-in end-to-end suite.

Resources are found the way sandboxctl finds them: the outputs of the stage's stacks
(`Sandbox-<stage>-*`), falling back to the names naming.py produces. Nothing here runs unless
SANDBOX_E2E=1 and the default credential chain resolves (STS GetCallerIdentity).
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any, TypeVar

from sandbox_common import dimensions
from sandbox_common import naming as n
from sandbox_common.turn_token import new_token

T = TypeVar("T")

HOW_TO_RUN = (
    "real-AWS suite: run with SANDBOX_E2E=1 (optionally SANDBOX_E2E_STAGE=dev, SANDBOX_E2E_TENANT=acme,"
    " SANDBOX_E2E_OTHER_TENANT=globex, SANDBOX_E2E_TEMPLATE=analyst) and AWS credentials for a deployed"
    " stage: SANDBOX_E2E=1 .venv/bin/pytest -q tests/e2e"
)
# The quota and pre-flight caches hold values for at most 60 s.
CACHE_TTL_SECONDS = 60
CACHE_MARGIN_SECONDS = 10


def _credentials_resolve() -> bool:
    try:
        import boto3

        boto3.client("sts").get_caller_identity()
    except Exception:  # noqa: BLE001 - no credentials, no network: the suite is skipped
        return False
    return True


@lru_cache(maxsize=1)
def e2e_enabled() -> bool:
    return os.environ.get("SANDBOX_E2E") == "1" and _credentials_resolve()


def new_id(kind: str) -> str:
    return f"e2e-{kind}-{uuid.uuid4().hex[:12]}"


def wait_for(probe: Callable[[], T | None], *, timeout: float, interval: float = 5.0, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@cache
def turn_token(tenant: str, turn: str) -> str:
    """One fresh secret per (tenant, turn), carried by every action of it."""
    return new_token()


@dataclass(frozen=True)
class Deployed:
    stage: str
    tenant: str
    other_tenant: str
    template: str
    outputs: dict[str, str]

    @classmethod
    def discover(cls) -> Deployed:
        import boto3

        stage = os.environ.get("SANDBOX_E2E_STAGE", "dev")
        prefix = n.stack_name(stage, "")
        outputs: dict[str, str] = {}
        for page in boto3.client("cloudformation").get_paginator("describe_stacks").paginate():
            for stack in page["Stacks"]:
                if stack["StackName"].startswith(prefix):
                    outputs.update({o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])})
        return cls(
            stage=stage,
            tenant=os.environ.get("SANDBOX_E2E_TENANT", "acme"),
            other_tenant=os.environ.get("SANDBOX_E2E_OTHER_TENANT", "globex"),
            template=os.environ.get("SANDBOX_E2E_TEMPLATE", "analyst"),
            outputs=outputs,
        )

    # --- names -----------------------------------------------------------------------------
    def function(self, logical: str) -> str:
        key = {n.DISPATCH: n.OUTPUT_DISPATCH_FUNCTION, n.QUOTA_CHECK: n.OUTPUT_QUOTA_FUNCTION}.get(logical)
        return self.outputs.get(key or "", n.function_name(self.stage, logical))

    def table(self, spec: n.TableSpec) -> str:
        return self.outputs.get(f"{n.OUTPUT_TABLE_PREFIX}{spec.logical}", spec.physical(self.stage))

    # --- calls -----------------------------------------------------------------------------
    def invoke(self, logical: str, event: dict[str, Any]) -> dict[str, Any]:
        import boto3

        out = boto3.client("lambda").invoke(
            FunctionName=self.function(logical),
            InvocationType="RequestResponse",
            Payload=json.dumps(event).encode(),
        )
        body = json.loads(out["Payload"].read())
        assert "FunctionError" not in out, f"{logical} failed: {body}"
        return body

    def dispatch(self, event: dict[str, Any]) -> dict[str, Any]:
        return self.invoke(n.DISPATCH, event)

    def begin_turn(self, tenant: str, agent: str, turn: str) -> dict[str, Any]:
        return self.dispatch(
            {
                "action": "begin_turn",
                "tenant_id": tenant,
                "agent_id": agent,
                "template_id": self.template,
                "turn_id": turn,
                "turn_token": turn_token(tenant, turn),
            }
        )

    def execute(
        self,
        tenant: str,
        agent: str,
        turn: str,
        code: str,
        call: str | None = None,
        language: str | None = None,
    ) -> dict[str, Any]:
        event = {
            "action": "execute_code",
            "tenant_id": tenant,
            "agent_id": agent,
            "template_id": self.template,
            "turn_id": turn,
            "call_id": call or new_id("call"),
            "code": code,
            "invocation_source": "scheduled",
            "turn_token": turn_token(tenant, turn),
        }
        if language is not None:
            event["language"] = language
        return self.dispatch(event)

    def end_turn(self, tenant: str, turn: str) -> dict[str, Any]:
        return self.dispatch(
            {
                "action": "end_turn",
                "tenant_id": tenant,
                "turn_id": turn,
                "turn_token": turn_token(tenant, turn),
            }
        )

    # --- reads -----------------------------------------------------------------------------
    def audit_rows_for_session(self, session_id: str) -> list[dict[str, Any]]:
        import boto3
        from boto3.dynamodb.types import TypeDeserializer

        out = boto3.client("dynamodb").query(
            TableName=self.table(n.INVOCATIONS),
            IndexName="by_session",
            KeyConditionExpression="session_id = :s",
            ExpressionAttributeValues={":s": {"S": session_id}},
        )
        des = TypeDeserializer()
        return [{k: des.deserialize(v) for k, v in item.items()} for item in out.get("Items", [])]

    def findings_for_stream(self, day: str, log_stream: str) -> list[dict[str, Any]]:
        import boto3
        from boto3.dynamodb.types import TypeDeserializer

        out = boto3.client("dynamodb").query(
            TableName=self.table(n.FINDINGS),
            KeyConditionExpression="finding_date = :d",
            FilterExpression="log_stream = :s",
            ExpressionAttributeValues={":d": {"S": day}, ":s": {"S": log_stream}},
        )
        des = TypeDeserializer()
        return [{k: des.deserialize(v) for k, v in item.items()} for item in out.get("Items", [])]

    # --- caps ------------------------------------------------------------------------------
    @contextmanager
    def cap_override(self, dimension: str, value: int, *, tenant: str) -> Iterator[None]:
        """Set a per-tenant cap override, wait out the caches, and always restore it."""
        import boto3

        ssm = boto3.client("ssm")
        path = dimensions.parameter(self.stage, dimension, tenant)
        try:
            previous: str | None = ssm.get_parameter(Name=path)["Parameter"]["Value"]
        except ssm.exceptions.ParameterNotFound:
            previous = None
        ssm.put_parameter(Name=path, Value=str(value), Type="String", Overwrite=True)
        try:
            time.sleep(CACHE_TTL_SECONDS + CACHE_MARGIN_SECONDS)
            yield
        finally:
            if previous is None:
                ssm.delete_parameter(Name=path)
            else:
                ssm.put_parameter(Name=path, Value=previous, Type="String", Overwrite=True)


def subscription_event(log_group: str, log_stream: str, messages: list[str]) -> dict[str, Any]:
    """A CloudWatch Logs subscription delivery, encoded exactly as Lambda receives it."""
    now_ms = int(time.time() * 1000)
    payload = {
        "messageType": "DATA_MESSAGE",
        "owner": "123456789012",
        "logGroup": log_group,
        "logStream": log_stream,
        "subscriptionFilters": ["e2e"],
        "logEvents": [
            {"id": f"{now_ms}{i:04d}", "timestamp": now_ms, "message": message}
            for i, message in enumerate(messages)
        ],
    }
    data = base64.b64encode(gzip.compress(json.dumps(payload).encode())).decode()
    return {"awslogs": {"data": data}}
