"""§4.1 decision table, row by row (pure function, no I/O)."""

from __future__ import annotations

from dispatch.preflight import decide
from sandbox_common.models import TenantSubstrate

SUB = TenantSubstrate(
    tenant_id="acme", compliance_tier="standard", environments=("default-public", "internal-only"),
    templates={"analyst": "default-public", "chat": None},
    interpreters={"default-public": "ci-pub", "internal-only": "ci-int"},
    runner_role_arn="arn:aws:iam::123456789012:role/runner",
)  # fmt: skip


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
    assert decide("acme", "analyst", SUB, {"sandbox_enabled": True, "compliance_tier": "regulated"}, None).status == "disabled"


def test_decide_provisioning_when_interpreter_not_published() -> None:
    partial = SUB.model_copy(update={"interpreters": {"internal-only": "ci-int"}})
    pf = decide("acme", "analyst", partial, None, None)
    assert (pf.status, pf.reason, pf.interpreter_id) == ("provisioning", "interpreter_not_ready", None)
