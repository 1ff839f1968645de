"""The parts of the house and who may import whom: the table the import-graph test enforces.

A module belongs to the part with the longest prefix matching its name (module names as Lambda,
the CLI and the tests import them: `dispatch.handler`, `sandbox_common.naming`, `infra.cdk.config`).
Every module of the tree must belong to a part. An import from one part to another is allowed only
when MAY_IMPORT says so; NEVER lists the edges the house rules forbid outright (MAY_IMPORT must not
contain any of them, so widening the table cannot quietly allow one).
"""

from __future__ import annotations

APP = "App"
CDK = "CDK"
DISPATCH = "Lambda dispatch"
QUOTA_CHECK = "Lambda quota_check"
REAPER = "Lambda reaper"
BACKSTOP = "Lambda backstop"
EGRESS_SETUP = "Lambda egress_setup"  # the egress path's deploy-time custom resource
SHARED_RUN_TIME = "Shared run time"
COMMON = "Common"
SESSION_RUNTIME = "Session runtime"
CLIENT = "Client"
LOCAL = "Local"
CLI = "CLI"
DEMO = "Demo"
EGRESS = "Egress"
TESTS = "Tests"

LAMBDAS = (DISPATCH, QUOTA_CHECK, REAPER, BACKSTOP, EGRESS_SETUP)

# part -> the module prefixes it holds
PARTS: dict[str, tuple[str, ...]] = {
    APP: ("app",),  # app.py: the CDK entry point
    CDK: ("infra.cdk",),  # config, app factory, stacks, constructs, layer build
    DISPATCH: ("dispatch",),
    QUOTA_CHECK: ("quota_check",),
    REAPER: ("reaper",),
    BACKSTOP: ("backstop",),
    EGRESS_SETUP: ("egress_setup",),
    # What dispatch and the reaper both run (session runner, job end, finishing interrupted calls)
    SHARED_RUN_TIME: ("sandbox_runtime",),
    COMMON: ("sandbox_common",),  # layers/common/python: what the Lambdas share
    SESSION_RUNTIME: ("sandbox_session",),  # layers/common/python: shipped into sessions as source
    EGRESS: ("egress_proxy",),  # functions/egress_proxy: the egress proxy's addon and its logic
    CLIENT: ("sandbox_client",),  # layers/client: the agent client distribution
    LOCAL: ("infra.local",),  # moto server, local interpreter, Lambda emulator, local resources
    CLI: ("infra.sandboxctl",),
    DEMO: ("infra.demo",),
    TESTS: ("tests",),
}

# Packages that only group rooms: their __init__ holds no code (a docstring at most).
CONTAINERS = ("infra",)

_LAMBDA_RUN_TIME = {COMMON, SHARED_RUN_TIME}

# part -> the other parts it may import (its own modules it always may)
MAY_IMPORT: dict[str, set[str]] = {
    APP: {CDK},
    CDK: {COMMON},
    DISPATCH: _LAMBDA_RUN_TIME | {SESSION_RUNTIME},
    QUOTA_CHECK: set(_LAMBDA_RUN_TIME),
    REAPER: _LAMBDA_RUN_TIME | {SESSION_RUNTIME},
    BACKSTOP: set(_LAMBDA_RUN_TIME),
    # CloudFormation's custom resource: boto3 and cryptography only, nothing of ours
    EGRESS_SETUP: set(),
    SHARED_RUN_TIME: {COMMON, SESSION_RUNTIME},
    # Common ships the session runtime's source into sessions (the readiness preamble, the tool
    # installer): the session runtime is the bottom of the graph, it imports nothing of ours.
    COMMON: {SESSION_RUNTIME},
    SESSION_RUNTIME: set(),
    CLIENT: set(),
    # Egress: the proxy container ships it alone, with Common
    EGRESS: {COMMON},
    # Local: the interpreter's worker runs the session runtime's shell launch (from its source)
    LOCAL: {COMMON, CDK, SESSION_RUNTIME, EGRESS},
    CLI: {CLIENT, LOCAL, COMMON, CDK},
    DEMO: {CLIENT, CLI, LOCAL, COMMON},
    TESTS: set(PARTS) - {TESTS},
}

# The house's nevers (importer part, imported part).
NEVER: tuple[tuple[str, str], ...] = (
    (LOCAL, CLI),
    *((fn, other) for fn in LAMBDAS for other in (CLIENT, CLI, LOCAL, CDK, DEMO)),
    # one Lambda never imports another: what two of them run is the shared run time's
    *((fn, other) for fn in LAMBDAS for other in LAMBDAS if fn != other),
    *((SHARED_RUN_TIME, fn) for fn in LAMBDAS),
    *((COMMON, other) for other in (*LAMBDAS, SHARED_RUN_TIME, CLIENT, LOCAL, CLI, CDK, DEMO)),
    (CDK, LOCAL),
    (CDK, CLI),
    *((SESSION_RUNTIME, other) for other in PARTS if other != SESSION_RUNTIME),
    *((CLIENT, other) for other in PARTS if other != CLIENT),
    # the egress proxy ships alone in its container: no Lambda, local stack, CLI, client or CDK
    *(
        (EGRESS, other)
        for other in (*LAMBDAS, SHARED_RUN_TIME, LOCAL, CLI, CLIENT, CDK, DEMO, SESSION_RUNTIME)
    ),
    # nothing of the Lambdas, Common or the CDK reaches into the proxy
    *((other, EGRESS) for other in (*LAMBDAS, SHARED_RUN_TIME, COMMON, CDK, CLIENT, SESSION_RUNTIME)),
    *((other, TESTS) for other in PARTS if other != TESTS),
)

# Third-party imports (top-level module names) a part may use beyond the standard library:
# the session runtime none at all (it runs from its source text in a session that has only the
# interpreter's own library), the client only what its distribution declares
# (layers/client/pyproject.toml: boto3, and its [strands] / [mcp] extras). Import name ->
# the declared distribution that brings it.
CLIENT_THIRD_PARTY: dict[str, str] = {
    "boto3": "boto3",
    "botocore": "boto3",  # boto3's own dependency, the client's configuration type
    "strands": "strands-agents",
    "mcp": "mcp",
    "mcp_types": "mcp",  # the mcp SDK's types, a dependency of mcp
    "anyio": "anyio",
    "jsonschema": "jsonschema",
}
# The egress proxy: the engine and what its requirements file pins for it (boto3 for its store).
EGRESS_THIRD_PARTY: dict[str, str] = {
    "mitmproxy": "mitmproxy",
    "boto3": "boto3",
    "botocore": "botocore",
    "certifi": "certifi",  # mitmproxy's own default trust, extended by a route CA
}
THIRD_PARTY_ALLOWED: dict[str, frozenset[str]] = {
    SESSION_RUNTIME: frozenset(),
    CLIENT: frozenset(CLIENT_THIRD_PARTY),
    EGRESS: frozenset(EGRESS_THIRD_PARTY),
}
# The session runtime's modules are executed one by one from their source text: none may import
# another module of ours, its own package's included.
STANDALONE = (SESSION_RUNTIME,)

# Inside dispatch: the capability packages. Each holds its stages of a call; one reaches another
# only through the call's state (`dispatch.call`) and the other's store (its `store` module: the
# data access); the lines (`dispatch.line`), the routes and the container's parts may use any.
DISPATCH_CAPABILITIES: tuple[str, ...] = tuple(
    f"dispatch.{c}"
    for c in ("idempotency", "turns", "preflight", "quota", "sessions", "files", "tools", "jobs")
)
CAPABILITY_STORE = "store"
