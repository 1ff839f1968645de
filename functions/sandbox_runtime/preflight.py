"""Pre-flight: may this tenant's template use a sandbox, and where does it run?

Sources, cached ≤ 60 s per container:
- the tenant's substrate JSON in SSM (published by its shard stack: tier, templates, interpreter
  ids, runner role) — config defaults;
- the TENANTS table: the operator's policy item (`sandbox_enabled`, `compliance_tier`) and the
  template's sandbox block, both written by sandboxctl — they win over the defaults.
The environment always comes from the template, never from the agent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sandbox_common import naming as n
from sandbox_common.models import TenantSubstrate
from sandbox_common.tenant_access import (
    TenantStateUnavailable,
    enabled,
    read_policy,
    read_substrate,
)
from sandbox_common.tool_spec import CODE_LANGUAGE, validate_tool_names
from sandbox_common.ttl_cache import TtlCache

Status = Literal["ready", "provisioning", "disabled", "not_requested"]
_UNSET = object()

# A dependency of pre-flight failed; callers fail closed. The tenant-wide reads (substrate, policy
# item) are Common's (`sandbox_common.tenant_access`), shared with the egress proxy.
PreflightUnavailable = TenantStateUnavailable


@dataclass(frozen=True)
class Preflight:
    status: Status
    tenant_id: str
    environment: str | None = None
    interpreter_id: str | None = None
    runner_role_arn: str | None = None
    allowed_interpreter_ids: tuple[str, ...] = field(default_factory=tuple)
    # The tenant's interpreter ARNs: the runner's credentials are confined to these (session policy)
    allowed_interpreter_arns: tuple[str, ...] = field(default_factory=tuple)
    reason: str | None = None
    data_read: tuple[str, ...] = ()  # the tenant's data.read S3 prefixes: s3_uri inputs
    tools: tuple[str, ...] = field(
        default_factory=tuple
    )  # the template's tool allowlist (docs/tool-calling.md)
    # (interpreter id, environment) of the tenant's `allowlist` environments: their sessions go out
    # through the egress proxy only, with a credential the runner issues (runner/egress.py)
    egress_interpreters: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def runs_tools(self, language: str, code: str) -> bool:
        """Whether code runs through the tools driver: Python code (a shell script or a Node.js
        program cannot call tools) of a template that allows tools, naming the module."""
        return language == CODE_LANGUAGE and bool(self.tools) and n.TOOLS_MODULE in code


def decide(
    tenant_id: str,
    template_id: str,
    substrate: TenantSubstrate | None,
    policy: dict[str, Any] | None,
    template_item: dict[str, Any] | None,
) -> Preflight:
    """The decision table, pure: no I/O, so every row is unit-testable."""
    if substrate is None and policy is None:
        return Preflight("disabled", tenant_id, reason="tenant_disabled")  # unknown tenant
    if template_item is not None:
        environment = template_item.get("environment")
    elif substrate is not None:
        environment = substrate.templates.get(template_id)
    else:
        environment = None
    if environment is None:
        return Preflight("not_requested", tenant_id)
    if not enabled(substrate, policy):
        return Preflight("disabled", tenant_id, environment=environment, reason="tenant_disabled")
    interpreters = substrate.interpreters if substrate else {}
    interpreter_id = interpreters.get(environment)
    runner_role_arn = substrate.runner_role_arn if substrate else None
    allowed = tuple(sorted(set(interpreters.values())))
    arns = tuple(sorted(set(substrate.interpreter_arns.values()))) if substrate else ()
    if not interpreter_id or not runner_role_arn:
        return Preflight(
            "provisioning",
            tenant_id,
            environment=environment,
            allowed_interpreter_ids=allowed,
            reason="interpreter_not_ready",
            tools=template_tools(template_item),
            egress_interpreters=egress_interpreters(interpreters),
        )
    return Preflight(
        "ready",
        tenant_id,
        environment=environment,
        interpreter_id=interpreter_id,
        runner_role_arn=runner_role_arn,
        allowed_interpreter_ids=allowed,
        allowed_interpreter_arns=arns,
        data_read=tuple(substrate.data_read) if substrate else (),
        tools=template_tools(template_item),
        egress_interpreters=egress_interpreters(interpreters),
    )


def egress_interpreters(interpreters: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """(interpreter id, environment) of every `allowlist` environment among `interpreters`."""
    return tuple(sorted((i, e) for e, i in interpreters.items() if n.EGRESS_MODE.get(e) == "allowlist"))


def template_tools(template_item: dict[str, Any] | None) -> tuple[str, ...]:
    """The operator-set allowlist of a template; anything unreadable allows nothing."""
    raw = (template_item or {}).get(n.TEMPLATE_TOOLS_ATTRIBUTE)
    if not isinstance(raw, (list, tuple, set)):
        return ()
    try:
        return validate_tool_names(raw)
    except ValueError:
        return ()


class PreflightReader:
    def __init__(self, *, stage: str, tenants_table: str, ttl_seconds: int, ssm: Any, ddb: Any) -> None:
        self.stage = stage
        self.tenants_table = tenants_table
        self.ssm = ssm
        self.ddb = ddb
        self.decisions: TtlCache[Preflight] = TtlCache(ttl_seconds)  # (tenant, template) -> decision
        self._substrates: TtlCache[TenantSubstrate | None] = TtlCache(ttl_seconds)
        self._enabled: TtlCache[bool] = TtlCache(ttl_seconds)

    def check(self, tenant_id: str, template_id: str) -> Preflight:
        return self.decisions.get_or_load(
            (tenant_id, template_id), lambda: self._load(tenant_id, template_id)
        )

    def cached(self, tenant_id: str, template_id: str) -> Preflight | None:
        """The cached decision, or None when it would take a read (the speculative quota check asks this)."""
        return self.decisions.peek((tenant_id, template_id))

    def forget(self, tenant_id: str) -> None:
        """Drop the tenant's cached decisions (its policy changed: the count's transaction saw it
        disabled, or the kill switch was announced), so that the next call reads them again."""
        self.decisions.drop(lambda key: isinstance(key, tuple) and key[0] == tenant_id)
        self._enabled.drop(lambda key: key == tenant_id)
        self._substrates.drop(lambda key: key == tenant_id)

    def tenant_enabled(self, tenant_id: str) -> bool:
        """The tenant-wide half of the decision (`enabled`), whatever the template: the kill
        switch's view of a disabled tenant. Cached like `check`; raises PreflightUnavailable."""
        return self._enabled.get_or_load(
            tenant_id,
            lambda: enabled(
                self._substrates.get_or_load(tenant_id, lambda: self._substrate(tenant_id)),
                self._policy(tenant_id),
            ),
        )

    def runner_target(self, tenant_id: str) -> Preflight:
        """Just what a runner needs for an existing session (end_turn): no policy or template
        check, because stopping a session must work even after the tenant was disabled."""
        substrate = self._substrates.get_or_load(tenant_id, lambda: self._substrate(tenant_id))
        if substrate is None or not substrate.runner_role_arn:
            raise PreflightUnavailable("tenant substrate not published")
        return Preflight(
            "ready",
            tenant_id,
            runner_role_arn=substrate.runner_role_arn,
            allowed_interpreter_ids=tuple(sorted(set(substrate.interpreters.values()))),
            allowed_interpreter_arns=tuple(sorted(set(substrate.interpreter_arns.values()))),
            egress_interpreters=egress_interpreters(substrate.interpreters),
        )

    def interpreter_environment(self, tenant_id: str, interpreter_id: str) -> str | None:
        """The environment a tenant's interpreter serves (from its cached substrate), None if unknown."""
        substrate = self._substrates.get_or_load(tenant_id, lambda: self._substrate(tenant_id))
        if substrate is None:
            return None
        return next((e for e, i in substrate.interpreters.items() if i == interpreter_id), None)

    def _load(self, tenant_id: str, template_id: str) -> Preflight:
        substrate = self._substrates.get_or_load(tenant_id, lambda: self._substrate(tenant_id))
        policy, template_item = self._policy_and_template(tenant_id, template_id)
        return decide(tenant_id, template_id, substrate, policy, template_item)

    def _substrate(self, tenant_id: str) -> TenantSubstrate | None:
        return read_substrate(self.ssm, self.stage, tenant_id)

    def _policy(self, tenant_id: str) -> dict[str, Any] | None:
        return read_policy(self.ddb, self.tenants_table, tenant_id)

    def _policy_and_template(
        self, tenant_id: str, template_id: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        from boto3.dynamodb.types import TypeDeserializer

        keys = [
            n.TENANTS.key(tenant_id, n.TENANT_POLICY_ITEM),
            n.TENANTS.key(tenant_id, n.TEMPLATE_ITEM_PREFIX + template_id),
        ]
        try:
            out = self.ddb.batch_get_item(
                RequestItems={self.tenants_table: {"Keys": keys, "ConsistentRead": True}}
            )
        except Exception as exc:  # noqa: BLE001
            raise PreflightUnavailable(f"tenants:{type(exc).__name__}") from None
        if out.get("UnprocessedKeys"):
            raise PreflightUnavailable("tenants: unprocessed keys")
        if self.tenants_table not in out.get("Responses", {}):
            # An unreadable answer must not read as "no policy item" (= defaults): that would let a
            # disabled tenant run. Only an answer that names the table can say "no items".
            raise PreflightUnavailable("tenants: answer without Responses")
        deser = TypeDeserializer()
        policy = template = None
        for item in out.get("Responses", {}).get(self.tenants_table, []):
            plain = {k: deser.deserialize(v) for k, v in item.items()}
            if plain[n.TENANTS.sk] == n.TENANT_POLICY_ITEM:
                policy = plain
            else:
                template = plain
        return policy, template
