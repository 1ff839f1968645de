"""Property-based fuzzing of every entry point's input.

Properties, per generated input: the entry point answers (never an unhandled exception, never a
stack trace); an invalid input gets a named error; and an invalid input has no side effect —
proved by counting every AWS request the handler's own clients try to send (a `before-send`
hook that answers AccessDenied without touching the network, so valid inputs also stay cheap):
an invalid input must send none — no counter, no session, no audit row can exist without one.
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sandbox_common import aws, dimensions
from sandbox_common import naming as n

from tests.conftest import LambdaContext

from .faults import aws_response, error_body

# --- hostile strings ----------------------------------------------------------------------------
HOSTILE_FRAGMENTS = [
    "../",
    "/",
    "\\",
    "*",
    "?",
    "%",
    "'",
    '"',
    "`",
    "${x}",
    "{0}",
    "%s",
    "#c",
    ":v",
    "\x00",
    "\n",
    "\r\n",
    "\u202e",
    "é",
    "😀",
    "ＡＢＣ",
    " ",
    "\t",
    "acme/../globex",
    "/thinkwork/local/sandbox/caps",
    "attribute_not_exists(x) OR 1=1",
    "<redacted>",
]
hostile_ids = st.one_of(
    st.sampled_from(HOSTILE_FRAGMENTS),
    st.builds(
        lambda a, b: a + b, st.sampled_from(["acme", "agent-7", "t"]), st.sampled_from(HOSTILE_FRAGMENTS)
    ),
    st.text(min_size=0, max_size=40),
    st.just("a" * 10_240),  # 10 KB
    st.just("a" * 129),  # one past the id limit
    st.integers(),
    st.none(),
    st.booleans(),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=8,
)

TOKEN = "t" * 43  # a well-formed turn token
BASES = {
    "begin_turn": {
        "action": "begin_turn",
        "tenant_id": "acme",
        "agent_id": "agent-7",
        "template_id": "analyst",
        "turn_id": "turn-1",
        "user_id": "u-1",
        "turn_token": TOKEN,
    },
    "execute_code": {
        "action": "execute_code",
        "tenant_id": "acme",
        "agent_id": "agent-7",
        "template_id": "analyst",
        "turn_id": "turn-1",
        "call_id": "call-1",
        "code": "print(1)",
        "user_id": "u-1",
        "invocation_source": "chat",
        "turn_token": TOKEN,
    },
    "end_turn": {"action": "end_turn", "tenant_id": "acme", "turn_id": "turn-1", "turn_token": TOKEN},
}


@st.composite
def dispatch_events(draw: Any) -> Any:
    """Mostly a valid event with one thing broken; sometimes garbage of any shape."""
    kind = draw(
        st.sampled_from(["mutate", "mutate", "mutate", "extra", "missing", "code", "garbage", "string"])
    )
    if kind == "garbage":
        return draw(json_values)
    if kind == "string":
        return draw(st.one_of(st.text(max_size=50), st.builds(json.dumps, json_values), st.just("{not json")))
    event = dict(BASES[draw(st.sampled_from(sorted(BASES)))])
    if kind == "mutate":
        key = draw(st.sampled_from(sorted(event)))
        event[key] = draw(hostile_ids)
    elif kind == "extra":
        event[draw(st.sampled_from(["is_admin", "environment", "interpreter_id", "x"]))] = draw(json_values)
    elif kind == "missing":
        event.pop(
            draw(st.sampled_from(sorted(k for k in event if k not in ("user_id", "invocation_source"))))
        )
    else:
        event.update(
            action="execute_code", **{k: v for k, v in BASES["execute_code"].items() if k not in event}
        )
        event["code"] = draw(
            st.sampled_from(["", "   ", "\n\t", "x" * (256 * 1024 + 1), "é" * (128 * 1024 + 1)])
        )
    return event


class RequestCounter:
    """Counts (and refuses, offline) every request the clients it is armed on try to send."""

    def __init__(self) -> None:
        self.count = 0

    def hook(self, request: Any, event_name: str = "", **_: Any) -> Any:
        self.count += 1
        service = event_name.split(".")[1]
        protocol = {"sts": "query", "lambda": "lambda", "bedrock-agentcore": "rest-json"}.get(service, "json")
        status, headers, body = error_body(protocol, "access_denied")
        return aws_response(request.url, status, headers, body)

    def arm(self, *emitters: Any) -> None:
        for emitter in emitters:
            emitter.register("before-send", self.hook)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[RequestCounter]:
    """Every Lambda's CDK environment, every client armed with the counter (no network)."""
    from dispatch import parts as dependencies
    from dispatch.quota import client as quota_client
    from sandbox_common import settings
    from sandbox_runtime.runner import clear_cache, credentials

    from infra.cdk.config import build_config
    from infra.cdk.function_env import function_environment

    config = build_config("local")
    tables = {spec.logical: spec.physical("local") for spec in n.ALL_TABLES}
    for logical in (n.DISPATCH, n.QUOTA_CHECK, n.BACKSTOP):
        env = function_environment(
            config,
            logical,
            tables=tables,
            quota_function_name="quota",
            audit_dlq_url="http://127.0.0.1:9/queue/dlq",
        )
        for key, value in env.items():
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # a dead port: nothing can leak out
    settings.clear_caches()
    dependencies.reset()
    clear_cache()
    quota_client.lambda_client.cache_clear()
    counter = RequestCounter()
    counter.arm(
        *(aws.client(s).meta.events for s in ("dynamodb", "ssm", "sqs", "sts", "logs", "cloudwatch")),
        quota_client.lambda_client().meta.events,
        credentials.tenant_session.events,
    )
    logging.getLogger().setLevel(logging.CRITICAL)
    yield counter
    dependencies.reset()
    clear_cache()
    quota_client.lambda_client.cache_clear()


NAMED = {
    "SandboxInvalidRequest",
    "SandboxProvisioning",
    "SandboxCapExceeded",
    "SandboxTimeout",
    "SandboxOOM",
    "SandboxError",
}
_SETTINGS = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
}


def _is_valid_dispatch(event: Any) -> bool:
    from sandbox_common.errors import SandboxInvalidRequest
    from sandbox_common.models import parse_dispatch_event

    try:
        parse_dispatch_event(event)
        return True
    except SandboxInvalidRequest:
        return False


def test_fuzz_dispatch_handler(offline: RequestCounter, examples: int, record: Any, capsys: Any) -> None:
    from dispatch.handler import handler

    seen = {"examples": 0, "invalid": 0, "valid": 0, "unhandled": 0, "side_effects": 0}

    @settings(max_examples=examples, **_SETTINGS)
    @given(dispatch_events())
    def run(event: Any) -> None:
        # Given any input, When dispatch handles it
        before = offline.count
        seen["examples"] += 1
        try:
            response = handler(event, LambdaContext(function_name="dispatch"))
        except Exception:  # noqa: BLE001
            seen["unhandled"] += 1
            raise
        # Then it answers a dict with a named error or success, never a stack trace
        assert isinstance(response, dict) and isinstance(response.get("ok"), bool)
        assert "Traceback" not in json.dumps(response, default=str)
        if not response["ok"]:
            assert response["error"] in NAMED
        if _is_valid_dispatch(event):
            seen["valid"] += 1
            return
        # And invalid input is named as such and sends no AWS request at all
        seen["invalid"] += 1
        assert response["error"] == "SandboxInvalidRequest", (event, response)
        if offline.count != before:
            seen["side_effects"] += 1
        assert offline.count == before, event

    run()
    capsys.readouterr()
    record("fuzz", entry_point="dispatch handler (begin_turn / execute_code / end_turn / garbage)", **seen)
    assert seen["invalid"] > seen["examples"] // 2


def test_fuzz_quota_handler(offline: RequestCounter, examples: int, record: Any, capsys: Any) -> None:
    from quota_check.handler import handler
    from sandbox_common.errors import SandboxInvalidRequest
    from sandbox_common.quota_contract import parse_quota_event

    seen = {"examples": 0, "invalid": 0, "valid": 0, "unhandled": 0, "side_effects": 0}
    events = st.one_of(
        st.builds(lambda t, a: {"tenant_id": t, "agent_id": a}, hostile_ids, hostile_ids),
        st.builds(
            lambda x: {"tenant_id": "acme", "agent_id": "agent-7", **x},
            st.dictionaries(st.sampled_from(["extra", "cap", "count"]), json_values, min_size=1),
        ),
        json_values,
    )

    @settings(max_examples=examples, **_SETTINGS)
    @given(events)
    def run(event: Any) -> None:
        before = offline.count
        seen["examples"] += 1
        response = handler(event, LambdaContext(function_name="quota"))
        assert isinstance(response, dict) and isinstance(response.get("ok"), bool)
        try:
            parse_quota_event(event)
            seen["valid"] += 1
            assert (
                response["ok"] is False and response["dimension"] == dimensions.UNKNOWN
            )  # store refused: fail closed
            return
        except SandboxInvalidRequest:
            pass
        seen["invalid"] += 1
        assert response["error"] == "SandboxInvalidRequest"
        assert offline.count == before, event  # nothing read, nothing counted

    run()
    capsys.readouterr()
    record("fuzz", entry_point="sandbox-quota-check handler", **seen)


def _subscription(payload: bytes) -> dict[str, Any]:
    return {"awslogs": {"data": base64.b64encode(gzip.compress(payload)).decode()}}


def test_fuzz_backstop_handler(offline: RequestCounter, examples: int, record: Any, capsys: Any) -> None:
    from backstop.handler import handler

    seen = {"examples": 0, "invalid": 0, "valid": 0, "unhandled": 0, "side_effects": 0}
    documents = st.fixed_dictionaries(
        {
            "messageType": st.sampled_from(["DATA_MESSAGE", "CONTROL_MESSAGE"]),
            "logGroup": st.text(max_size=20),
            "logStream": st.text(max_size=20),
            "logEvents": st.lists(
                st.fixed_dictionaries(
                    {
                        "id": st.text(max_size=5),
                        "timestamp": st.integers(0, 2**41),
                        "message": st.text(max_size=200),
                    }
                ),
                max_size=3,
            ),
        }
    )
    events = st.one_of(
        json_values,  # not a subscription event at all
        st.builds(
            lambda b: {"awslogs": {"data": b}}, st.one_of(st.text(max_size=60), st.integers(), st.none())
        ),
        st.builds(_subscription, st.binary(max_size=200)),  # gzip of garbage
        st.builds(lambda v: _subscription(json.dumps(v).encode()), json_values),  # gzip of the wrong JSON
        st.builds(lambda d: _subscription(json.dumps(d).encode()), documents),  # well formed
    )

    @settings(max_examples=examples, **_SETTINGS)
    @given(events)
    def run(event: Any) -> None:
        seen["examples"] += 1
        try:
            summary = handler(event, LambdaContext(function_name="backstop"))
        except Exception:  # noqa: BLE001
            seen["unhandled"] += 1
            raise
        # Then a summary, never a crash; an undecodable payload is counted (and alarmed), not fatal
        assert isinstance(summary, dict) and summary["decode_errors"] in (0, 1)
        seen["invalid" if summary["decode_errors"] else "valid"] += 1

    run()
    capsys.readouterr()
    record("fuzz", entry_point="backstop handler (subscription payloads)", **seen)


def test_fuzz_sandboxctl_arguments(examples: int, record: Any, capsys: Any) -> None:
    from infra.sandboxctl.main import build_parser

    seen = {"examples": 0, "invalid": 0, "valid": 0, "unhandled": 0, "side_effects": 0}
    words = st.sampled_from(
        [
            "caps",
            "get",
            "set",
            "tenant",
            "show",
            "enable",
            "disable",
            "set-tier",
            "template",
            "put",
            "audit",
            "list",
            "replay",
            "counters",
            "findings",
            "invoke",
            "--tenant",
            "--agent",
            "--session",
            "--since",
            "--limit",
            "--environment",
            "--stage",
            "--json",
            "--local",
            "tenant_daily",
            "agent_hourly",
            "standard",
            "hipaa",
            "acme",
            "0",
            "-1",
            "default-public",
            "2026-11-21T00:00:00Z",
        ]
    )
    argvs = st.lists(
        st.one_of(words, hostile_ids.filter(lambda v: isinstance(v, str) and "\x00" not in v)), max_size=7
    )
    parser = build_parser()

    @settings(max_examples=examples, **_SETTINGS)
    @given(argvs)
    def run(argv: list[str]) -> None:
        seen["examples"] += 1
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse's bad usage: exit code 2, one message
            assert exc.code == 2
            seen["invalid"] += 1
            return
        seen["valid"] += 1
        # Every id that got through matches its pattern: nothing hostile reaches a command
        for attr in ("tenant", "agent", "session", "template"):
            value = getattr(args, attr, None)
            if isinstance(value, str):
                assert n.REQUEST_ID_RE.fullmatch(value), (attr, value)

    run()
    capsys.readouterr()
    record("fuzz", entry_point="sandboxctl argument vectors (parser)", **seen)
