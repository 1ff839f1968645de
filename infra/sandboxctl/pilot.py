"""`sandboxctl pilot`: the post-deploy canary. One scripted turn through the real dispatch
function, then checks of what it must have left behind (the peer system shipped quota and
audit "dark" for a week because nothing ran a real call after deploy).

Turn: begin_turn -> execute_code `x = 20` -> execute_code `print(x * 2 + 2)` (same session, so
state is shared) -> cap probe -> end_turn. Before the turn the pilot sets the tenant's override of
the narrowest call cap (`probe_dimension()`: keyed by agent, the shortest window: agent_hourly)
to 2 (the calls it plans before the probe; its agent id is new, so its count starts at 0), then
probes until dispatch answers SandboxCapExceeded — at once when the quota function has not cached
the tenant's caps, else within the ≤ 60 s cap cache TTL (probes admitted meanwhile are counted) —
and restores the previous override in a `finally`. While the override is set it applies to every
agent of the tenant: in production, run the pilot against a canary tenant.

Every check is recorded; the report's `ok` is true only if all passed.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sandbox_common import dimensions
from sandbox_common import naming as n
from sandbox_common.errors import SandboxCapExceeded
from sandbox_common.turn_token import new_token
from sandbox_common.windows import Windows, iso_z, utc_now

from infra.sandboxctl import ops, records_ops
from infra.sandboxctl.errors import CtlError
from infra.sandboxctl.target import Target

FIRST_CODE = "x = 20"
SECOND_CODE = "print(x * 2 + 2)"
PROBE_CODE = "print('pilot cap probe')"
PROBE_INTERVAL_SECONDS = 2.0
PLANNED_CALLS = 2  # execute_code calls before the cap probe


def probe_dimension() -> dimensions.Dimension:
    """The call cap the probe hits: one keyed by agent (the pilot's agent is new, so its count
    starts at 0), the shortest window (an hourly one resets soonest)."""
    by_agent = [d for d in dimensions.calls() if n.COUNTER_ATTR_AGENT in d.key]
    return min(by_agent, key=lambda d: d.window is not dimensions.Window.HOUR)


class _Pilot:
    def __init__(
        self, target: Target, tenant_id: str, template_id: str, echo: Callable[[str], Any] | None
    ) -> None:
        self.target = target
        self.tenant_id = tenant_id
        self.template_id = template_id
        self.run_id = uuid.uuid4().hex[:10]
        self.agent_id = f"pilot-{self.run_id}"
        self.turn_id = f"pilot-turn-{self.run_id}"
        self.turn_token = new_token()  # every action of the pilot's turn carries it
        self.echo = echo or (lambda _line: None)
        self.checks: list[dict[str, Any]] = []
        self.calls: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (request, response)
        self._call_seq = 0

    def check(self, name: str, ok: Any, detail: Any = None) -> bool:
        self.checks.append({"check": name, "ok": bool(ok), "detail": detail})
        self.echo(
            f"  [{'PASS' if ok else 'FAIL'}] {name}"
            + (f" ({detail})" if detail is not None and not ok else "")
        )
        return bool(ok)

    def request(self, action: str, **fields: Any) -> dict[str, Any]:
        event: dict[str, Any] = {
            "action": action,
            "tenant_id": self.tenant_id,
            "turn_id": self.turn_id,
            "turn_token": self.turn_token,
            **fields,
        }
        if action != n.Action.END_TURN:
            event.update(agent_id=self.agent_id, template_id=self.template_id)
        self.echo(f"-> {action} {fields.get('code', '')!r}" if "code" in fields else f"-> {action}")
        response = ops.invoke(self.target, event)
        keys = ("ok", "error", "exit_status", "stdout", "session_id", "stopped")
        summary: dict[str, Any] = {k: response.get(k) for k in keys if k in response}
        if "sandbox" in response:
            summary["sandbox.status"] = response["sandbox"].get("status")
        self.echo(f"<- {summary}")
        if action == n.Action.EXECUTE_CODE:
            self.calls.append((event, response))
        return response

    def execute(self, code: str) -> dict[str, Any]:
        self._call_seq += 1
        return self.request(
            n.Action.EXECUTE_CODE,
            call_id=f"{self.run_id}-{self._call_seq}",
            code=code,
            invocation_source="composition",
        )

    def agent_count(self) -> int:
        counters = ops.counters_show(self.target, self.tenant_id, self.agent_id)
        return int(counters[probe_dimension().name][0]["count"])


def _defaults(target: Target, tenant_id: str | None, template_id: str | None) -> tuple[str, str]:
    from infra.cdk.config import ConfigError, build_config

    if tenant_id is None:
        try:
            tenants = [t.id for t in build_config(target.stage).tenants if t.compliance_tier == "standard"]
        except ConfigError:
            tenants = []
        if not tenants:
            raise CtlError(f"no standard-tier tenant configured for stage {target.stage!r}; pass --tenant")
        tenant_id = tenants[0]
    if template_id is None:
        sub = ops.substrate(target, tenant_id)
        candidates = sorted(t for t, env in (sub.templates if sub else {}).items() if env)
        if not candidates:
            raise CtlError(f"tenant {tenant_id!r} has no template with a sandbox block; pass --template")
        template_id = candidates[0]
    return tenant_id, template_id


def run_pilot(
    target: Target,
    *,
    tenant_id: str | None = None,
    template_id: str | None = None,
    cap_wait_seconds: int = 90,
    echo: Callable[[str], Any] | None = print,
) -> dict[str, Any]:
    tenant_id, template_id = _defaults(target, tenant_id, template_id)
    p = _Pilot(target, tenant_id, template_id, echo)
    p.echo(
        f"pilot {p.run_id}: tenant {tenant_id}, template {template_id}, agent {p.agent_id}, stage"
        f" {target.stage}"
    )
    capped = probe_dimension()
    windows_before = Windows.at(utc_now())
    counts_before = ops.counters_show(target, tenant_id, p.agent_id)
    override = capped.parameter(target.stage, tenant_id)
    previous = ops.caps_get(target, tenant_id)["overrides"].get(tenant_id, {}).get(capped.name)
    admitted: list[dict[str, Any]] = []
    refused: dict[str, Any] | None = None
    error: str | None = None
    try:
        p.echo(f"   setting {override} = {PLANNED_CALLS} so the pilot agent's next call after two is refused")
        ops.caps_set(target, capped.name, PLANNED_CALLS, tenant_id)
        refused = _run_turn(p, cap_wait_seconds, admitted)
    except _Abort:
        pass
    except CtlError as exc:
        error = str(exc)
        p.check("dispatch answered every request", False, error)
    finally:
        _restore_and_end(p, target, capped, previous, tenant_id)

    if p.checks and all(c["ok"] for c in p.checks) and error is None:
        _check_refusal(p, refused)
        _check_audit(p)
        _check_counters(p, windows_before, counts_before, admitted)
    ok = bool(p.checks) and all(c["ok"] for c in p.checks) and error is None
    p.echo(f"pilot {p.run_id}: {'PASSED' if ok else 'FAILED'}")
    return {
        "ok": ok,
        "run_id": p.run_id,
        "tenant_id": tenant_id,
        "agent_id": p.agent_id,
        "turn_id": p.turn_id,
        "checks": p.checks,
        "error": error,
    }


def _run_turn(p: _Pilot, cap_wait_seconds: int, admitted: list[dict[str, Any]]) -> dict[str, Any] | None:
    """begin_turn, two calls that share a session, then probes until the lowered cap refuses one
    (its answer) or `cap_wait_seconds` pass (None); the admitted calls are added to `admitted`."""
    refused: dict[str, Any] | None = None
    begin = p.request(n.Action.BEGIN_TURN)
    if not p.check(
        "begin_turn is ready with the execute_code tool",
        begin.get("ok")
        and begin.get("sandbox", {}).get("status") == "ready"
        and begin["sandbox"].get("tool", {}).get("name") == n.Action.EXECUTE_CODE,
        begin,
    ):
        raise _Abort
    first = p.execute(FIRST_CODE)
    p.check("first execute_code ok", first.get("ok") and first.get("exit_status") == "ok", first)
    second = p.execute(SECOND_CODE)
    p.check(
        "second execute_code sees the first call's state (prints 42)",
        second.get("ok") and second.get("stdout") == "42\n",
        second.get("stdout"),
    )
    p.check(
        "both calls share one session",
        first.get("session_id") and first.get("session_id") == second.get("session_id"),
    )
    admitted += [r for r in (first, second) if r.get("ok")]

    deadline = time.monotonic() + cap_wait_seconds
    while True:
        probe = p.execute(PROBE_CODE)
        if probe.get("error") == SandboxCapExceeded.__name__:
            refused = probe
            break
        if not probe.get("ok"):
            break
        admitted.append(probe)  # a cached cap admitted it: wait for the cache to expire
        if time.monotonic() > deadline:
            break
        time.sleep(PROBE_INTERVAL_SECONDS)
    return refused


def _restore_and_end(
    p: _Pilot, target: Target, capped: dimensions.Dimension, previous: Any, tenant_id: str
) -> None:
    """The cap override as it was before the pilot, and the turn ended (its session stopped)."""
    override = capped.parameter(target.stage, tenant_id)
    try:
        if previous is None:
            ops.caps_unset(target, capped.name, tenant_id)
        else:
            ops.caps_set(target, capped.name, int(previous), tenant_id)
        p.check(f"{capped.name} override restored", True)
    except Exception as exc:  # noqa: BLE001 - must be reported, never hidden
        p.check(f"{capped.name} override restored (restore {override} by hand!)", False, str(exc))
    try:
        end = p.request(n.Action.END_TURN)
        had_session = any(r.get("session_id") for _, r in p.calls)
        p.check(
            "end_turn stopped the session" if had_session else "end_turn answered (no session to stop)",
            end.get("ok") is True and end.get("stopped") is had_session,
            end,
        )
    except CtlError as exc:
        p.check("end_turn answered", False, str(exc))


class _Abort(Exception):
    pass


def _check_refusal(p: _Pilot, refused: dict[str, Any] | None) -> None:
    if not p.check("the breaker refused once the cap was reached (SandboxCapExceeded)", refused is not None):
        return
    assert refused is not None
    probe = probe_dimension()
    p.check(f"refusal names the {probe.name} dimension", refused.get("dimension") == probe.name, refused)
    now = Windows.at(utc_now())
    # The probe ran moments ago: either side of a window boundary is a correct answer.
    earlier = Windows.at(now.now - timedelta(seconds=30))
    expected = {iso_z(probe.resets_at(now)), iso_z(probe.resets_at(earlier))}
    p.check(
        f"refusal resets at the next full {probe.window}",
        refused.get("resets_at") in expected,
        refused.get("resets_at"),
    )


def _check_audit(p: _Pilot) -> None:
    missing, wrong = [], []
    for request, response in p.calls:
        row = records_ops.audit_get(p.target, str(response.get("invocation_id")))
        if row is None:
            missing.append(request["call_id"])
            continue
        expected = {
            "tenant_id": p.tenant_id,
            "agent_id": p.agent_id,
            "turn_id": p.turn_id,
            "call_id": request["call_id"],
            "template_id": p.template_id,
            "exit_status": response.get("exit_status"),
            "executed_code_hash": hashlib.sha256(request["code"].encode("utf-8")).hexdigest(),
        }
        bad = {k: row.get(k) for k, v in expected.items() if row.get(k) != v}
        if bad:
            wrong.append({request["call_id"]: bad})
    p.check(f"one audit row per execute_code ({len(p.calls)} calls)", not missing, missing or None)
    p.check("audit rows match the calls (ids, exit_status, code hash)", not wrong, wrong or None)


def _check_counters(
    p: _Pilot, before: Windows, counts_before: dict[str, Any], admitted: list[dict[str, Any]]
) -> None:
    after = Windows.at(utc_now())
    counters = ops.counters_show(p.target, p.tenant_id, p.agent_id)
    for d in dimensions.calls():
        if d.window_label(after) != d.window_label(before):  # a new window began: nothing to compare
            continue
        if n.COUNTER_ATTR_AGENT in d.key:  # the pilot agent is new: its count is exactly its admitted calls
            agent = counters[d.name][0]["count"]
            p.check(f"{d.name} counter = admitted calls ({len(admitted)})", agent == len(admitted), agent)
        else:  # other agents may add to the tenant's window, never subtract
            now, then = counters[d.name]["count"], counts_before[d.name]["count"]
            p.check(
                f"{d.name} counter grew by at least the admitted calls",
                now >= then + len(admitted),
                {"before": then, "after": now},
            )
