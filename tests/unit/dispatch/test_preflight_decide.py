"""The pre-flight decision table, row by row (pure function, no I/O)."""

from __future__ import annotations

from sandbox_common.models import TenantSubstrate
from sandbox_runtime.preflight import decide

SUB = TenantSubstrate(
    tenant_id="acme",
    compliance_tier="standard",
    environments=("default-public", "internal-only"),
    templates={"analyst": "default-public", "chat": None},
    interpreters={"default-public": "ci-pub", "internal-only": "ci-int"},
    runner_role_arn="arn:aws:iam::123456789012:role/runner",
)


def test_decide_ready_uses_template_environment() -> None:
    pf = decide("acme", "analyst", SUB, None, None)
    assert (pf.status, pf.environment, pf.interpreter_id) == ("ready", "default-public", "ci-pub")
    assert pf.allowed_interpreter_ids == ("ci-int", "ci-pub")


def test_decide_template_override_wins() -> None:
    pf = decide("acme", "analyst", SUB, None, {"environment": "internal-only"})
    assert (pf.status, pf.interpreter_id) == ("ready", "ci-int")


def test_decide_not_requested_without_sandbox_block() -> None:
    assert decide("acme", "chat", SUB, None, None).status == "not_requested"
    assert decide("acme", "unknown-template", SUB, None, None).status == "not_requested"
    assert decide("acme", "analyst", SUB, None, {"environment": None}).status == "not_requested"


def test_decide_disabled_for_unknown_tenant_policy_and_tier() -> None:
    assert decide("nobody", "analyst", None, None, None).reason == "tenant_disabled"
    assert decide("acme", "analyst", SUB, {"sandbox_enabled": False}, None).status == "disabled"
    hipaa = SUB.model_copy(update={"compliance_tier": "hipaa"})
    assert decide("acme", "analyst", hipaa, None, None).status == "disabled"
    # an operator cannot enable a non-standard tier by flipping the flag alone
    assert (
        decide("acme", "analyst", SUB, {"sandbox_enabled": True, "compliance_tier": "regulated"}, None).status
        == "disabled"
    )


def test_decide_provisioning_when_interpreter_not_published() -> None:
    partial = SUB.model_copy(update={"interpreters": {"internal-only": "ci-int"}})
    pf = decide("acme", "analyst", partial, None, None)
    assert (pf.status, pf.reason, pf.interpreter_id) == ("provisioning", "interpreter_not_ready", None)


def test_decide_exposes_the_templates_tool_allowlist() -> None:
    # Given a template item with a tool allowlist (as sandboxctl stores it)
    item = {"environment": "default-public", "tools": ["query_sales", "lookup"]}

    # When pre-flight decides
    pf = decide("acme", "analyst", SUB, None, item)

    # Then the allowlist is exposed, sorted
    assert pf.status == "ready"
    assert pf.tools == ("lookup", "query_sales")


def test_decide_unreadable_tool_allowlist_allows_nothing() -> None:
    # Given template items whose tools attribute is malformed
    for tools in ("query_sales", ["ok", "bad name"], [1, 2], None):
        # When / Then no tool is callable (fail closed)
        assert (
            decide("acme", "analyst", SUB, None, {"environment": "default-public", "tools": tools}).tools
            == ()
        )
