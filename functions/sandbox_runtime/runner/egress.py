"""The runner's side of an `allowlist` session's egress: its proxy credential and the readiness
call's proxy set-up.

A session of an `allowlist` environment (naming.EGRESS_MODE) reaches nothing but the stage's
egress proxy, and the proxy refuses a connection without a valid credential of a live session.
When the runner starts such a session it:

1. issues the session's credential (egress_store.EgressStore.issue): a random secret, stored
   hashed with the tenant, the environment and an expiry. A failure is a provisioning failure:
   the session is stopped, never left running without its credential;
2. sends the secret into the session once, inside the readiness call, which registers it with
   the stdio redactor, sets the session's proxy configuration and makes the /bind request through
   the proxy (sandbox_session.egress); the readiness check fails, and the session is stopped,
   unless the proxy answered it;
3. revokes the credential whenever it stops the session (end_turn, a timeout, the reaper, a
   failed start): `revoked_at`, after which the proxy refuses it.

Where the session sees the proxy, its CA bundle and the stage's package index comes from the
function's environment (`EgressEndpoints.from_settings`), set by infra/cdk/function_env.py and
the local stack.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from sandbox_common import aws
from sandbox_common import naming as n
from sandbox_common.observability import logger
from sandbox_common.settings import EgressSettings
from sandbox_session import egress as session_egress

from sandbox_runtime.egress_store import EgressStore

MARKER = session_egress.MARKER
PRIVATE_MODULE = "_sandbox_egress"

_INSTALLER = """\
def _sbx_egress(source, name, config):
    import sys, types
    module = types.ModuleType(name)
    exec(compile(source, "<" + name + ">", "exec"), module.__dict__)
    module.setup(config)


_sbx_egress({source!r}, {name!r}, __import__("json").loads({config!r}))
del _sbx_egress
"""


@dataclass(frozen=True)
class EgressEndpoints:
    """How a session sees the egress proxy (an http:// URL without credential), where the proxy's CA
    bundle is inside the session, and the stage's package index (may be empty)."""

    proxy_url: str
    ca_bundle: str
    index_url: str = ""

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.proxy_url)
        if parts.scheme != "http" or not parts.hostname or not parts.port or parts.username or parts.path:
            raise ValueError(f"the egress proxy URL must be http://HOST:PORT, got {self.proxy_url!r}")
        if not self.ca_bundle.startswith("/"):
            raise ValueError(f"the egress CA bundle must be an absolute path, got {self.ca_bundle!r}")

    def with_credential(self, session_id: str, secret: str) -> str:
        """`http://SESSION_ID:SECRET@HOST:PORT`: what the session's clients send as Proxy-Authorization."""
        parts = urllib.parse.urlsplit(self.proxy_url)
        user = urllib.parse.quote(session_id, safe="")
        password = urllib.parse.quote(secret, safe="")
        return f"http://{user}:{password}@{parts.hostname}:{parts.port}"


@dataclass(frozen=True)
class SessionEgress:
    """What the runner needs to give allowlist sessions their egress: the credential store and the
    endpoints (None when the function's environment names no proxy: such sessions cannot start)."""

    store: EgressStore
    endpoints: EgressEndpoints | None
    bind_scheme: str = "https"


def session_egress_from(settings: EgressSettings, ddb: Any) -> SessionEgress | None:
    """The function's egress settings as the runner uses them: None without an egress table (a
    stage without egress: allowlist sessions are refused); endpoints None when the proxy is not
    named, or named wrongly (logged), so that such sessions are refused too."""
    if not settings.egress_table:
        return None
    endpoints = None
    if settings.egress_proxy_url or settings.egress_ca_bundle:
        try:
            endpoints = EgressEndpoints(
                settings.egress_proxy_url, settings.egress_ca_bundle, settings.egress_index_url
            )
        except ValueError as exc:
            logger.error("egress endpoints unusable", extra={"failure_reason": str(exc)})
    return SessionEgress(EgressStore(table_name=settings.egress_table, ddb=ddb), endpoints)


@lru_cache(maxsize=1)
def direct_hosts() -> tuple[str, ...]:
    """What a session reaches without the proxy: S3 in the runner's region (the session's), which
    an AWS allowlist session reaches through its VPC's gateway endpoint (tenant data, `s3_uri`
    inputs); the local stack's sessions reach S3 through their loopback relay either way."""
    region = aws.session().region_name
    return n.s3_endpoint_names(region) if region else ()


@lru_cache(maxsize=1)
def _session_source() -> str:
    return Path(session_egress.__file__).read_text(encoding="utf-8")


def setup_source(endpoints: EgressEndpoints, session_id: str, secret: str, *, bind_scheme: str) -> str:
    """The readiness call's egress part: the session runtime's egress module, run with this
    session's configuration (its credential included)."""
    config = {
        "proxy_url": endpoints.with_credential(session_id, secret),
        "ca_bundle": endpoints.ca_bundle,
        "index_url": endpoints.index_url,
        "bind_scheme": bind_scheme,
        "direct_hosts": list(direct_hosts()),
    }
    return _INSTALLER.format(source=_session_source(), name=PRIVATE_MODULE, config=json.dumps(config))


def bind_problem(stdout: str) -> str | None:
    """None when the readiness call's egress line says the proxy bound the session, else what
    went wrong (a short code: never the credential, which the line never holds)."""
    lines = [line for line in stdout.splitlines() if line.startswith(MARKER)]
    if len(lines) != 1:
        return "egress_marker_missing" if not lines else "egress_marker_repeated"
    try:
        payload = json.loads(lines[0][len(MARKER) :])
    except ValueError:
        return "egress_marker_unreadable"
    if not isinstance(payload, dict):
        return "egress_marker_unreadable"
    if payload.get("bound") is True:
        return None
    status, error = payload.get("status"), payload.get("error")
    detail = f"status_{status}" if isinstance(status, int) else str(error or "unknown")[:60]
    return f"egress_bind_failed:{detail}"
