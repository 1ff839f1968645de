"""The local stack as a whole: detached processes, idempotent `up`, resources in moto built from
the shared definitions, functions started with their CDK environment, and a clean `down`."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_common import dimensions
from sandbox_common import naming as n
from sandbox_common.models import TenantSubstrate

from infra.cdk.config import build_config
from infra.cdk.function_env import function_environment
from infra.local import stack
from infra.local.state import LocalStackError, LocalState, pid_alive, process_alive, read_state
from infra.sandboxctl import records_ops
from infra.sandboxctl.target import local_target


@pytest.fixture(scope="module")
def stack_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("local-stack")
    stack.up(directory)
    yield directory
    stack.down(directory)


@pytest.fixture
def state(stack_dir: Path) -> LocalState:
    current = read_state(stack_dir)
    assert current is not None
    return current


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def test_up_starts_five_detached_components(state: LocalState) -> None:
    # Given a started stack
    # When its status is read
    status = stack.status(state.directory)
    # Then moto, the interpreter, the Lambda emulator, the egress proxy and the package index run,
    # each leading its own process group
    assert status["running"] is True
    assert set(status["processes"]) == {"moto", "interpreter", "lambda", "egress", "index"}
    for proc in status["processes"].values():
        assert proc["alive"] and os.getpgid(proc["pid"]) == proc["pid"]
        assert proc["endpoint"].startswith(("http://127.0.0.1:", "https://127.0.0.1:"))
    # and the interpreter was given the proxy and the CA certificate (never its key) it records
    egress = status["egress"]
    interpreter = status["processes"]["interpreter"]["argv"]
    assert interpreter[interpreter.index("--egress-proxy") + 1] == egress["proxy"]
    assert interpreter[interpreter.index("--egress-ca-cert") + 1] == egress["ca_cert"]
    pem = Path(egress["ca_cert"]).read_text()
    assert "BEGIN CERTIFICATE" in pem and "PRIVATE KEY" not in pem
    assert (Path(egress["ca_cert"]).stat().st_mode & 0o777) == 0o644
    assert (state.directory / "egress").stat().st_mode & 0o777 == 0o700


def test_up_is_idempotent(state: LocalState) -> None:
    # Given a running stack
    before = {k: v["pid"] for k, v in state.data["processes"].items()}
    # When `up` runs again
    again, started = stack.up(state.directory)
    # Then nothing new is started and the same endpoints are returned
    assert started is False
    assert {k: v["pid"] for k, v in again.data["processes"].items()} == before


def test_resources_follow_the_shared_definitions(state: LocalState) -> None:
    # Given the local stage config
    config = build_config("local")
    ddb, ssm, iam = state.client("dynamodb"), state.client("ssm"), state.client("iam")
    # When the resources in moto are described
    # Then every table has the spec's keys, GSIs and TTL attribute
    for spec in n.ALL_TABLES:
        table = ddb.describe_table(TableName=spec.physical("local"))["Table"]
        keys = {k["KeyType"]: k["AttributeName"] for k in table["KeySchema"]}
        assert keys == {"HASH": spec.pk, **({"RANGE": spec.sk} if spec.sk else {})}
        gsis = {
            g["IndexName"]: [k["AttributeName"] for k in g["KeySchema"]]
            for g in table.get("GlobalSecondaryIndexes", [])
        }
        assert gsis == {i.name: [i.pk, *([i.sk] if i.sk else [])] for i in spec.indexes}
        ttl = ddb.describe_time_to_live(TableName=spec.physical("local"))["TimeToLiveDescription"]
        assert ttl.get("AttributeName") == spec.ttl_attribute
    # and the caps are the config's defaults at the shared SSM paths
    for dim in dimensions.calls():
        value = ssm.get_parameter(Name=dim.parameter("local"))["Parameter"]["Value"]
        assert value == str(config.caps.of(dim.name))
    # and each tenant has a substrate naming its interpreters (ids and ARNs) and the stage's one
    # runner role
    role = iam.get_role(RoleName=n.runner_role_name("local"))["Role"]
    assert config.tenants  # the loop below must run
    for tenant in config.tenants:
        raw = ssm.get_parameter(Name=n.tenant_substrate_parameter("local", tenant.id))["Parameter"]["Value"]
        sub = TenantSubstrate.model_validate_json(raw)
        assert sub.interpreters == {e: n.interpreter_name("local", tenant.id, e) for e in tenant.environments}
        assert {e: a.rsplit("/", 1)[1] for e, a in sub.interpreter_arns.items()} == sub.interpreters
        assert sub.runner_role_arn == role["Arn"]


def test_interpreters_are_registered_with_their_network_mode(state: LocalState) -> None:
    # Given the interpreters the stage declares
    agentcore = state.client("bedrock-agentcore")
    acme_int = n.interpreter_name("local", "acme", "internal-only")
    # When a session is started on a registered id, and on an unknown one
    started = agentcore.start_code_interpreter_session(
        codeInterpreterIdentifier=acme_int, sessionTimeoutSeconds=60
    )
    agentcore.stop_code_interpreter_session(
        codeInterpreterIdentifier=acme_int, sessionId=started["sessionId"]
    )
    with pytest.raises(agentcore.exceptions.ResourceNotFoundException):
        agentcore.start_code_interpreter_session(codeInterpreterIdentifier="sbx_local_nobody_pub")
    # Then the registered one works and the unknown one is refused as AgentCore refuses it
    assert started["codeInterpreterIdentifier"] == acme_int


def test_function_workers_run_with_exactly_their_cdk_environment(state: LocalState) -> None:
    # Given the quota function invoked once through the emulator (a warm worker now exists)
    lam = state.client("lambda")
    name = state.resources.functions[n.QUOTA_CHECK]
    out = lam.invoke(
        FunctionName=name, Payload=json.dumps({"tenant_id": "globex", "agent_id": "env-probe"}).encode()
    )
    assert json.loads(out["Payload"].read())["ok"] is True
    # When the worker process's real environment is read from /proc
    pgid = state.data["processes"]["lambda"]["pgid"]
    workers = [
        p for p in stack.group_members(pgid) if b"lambda_worker.py" in Path(f"/proc/{p}/cmdline").read_bytes()
    ]
    envs = [_environ(p) for p in workers]
    quota_env = next(e for e in envs if e.get("AWS_LAMBDA_FUNCTION_NAME") == name)
    # Then it is function_environment(...) (what CDK sets) plus the local endpoints, credentials
    # and the Lambda runtime's own variables — nothing of the caller's environment
    expected = function_environment(
        build_config("local"),
        n.QUOTA_CHECK,
        tables=state.resources.tables,
        quota_function_name=state.resources.functions[n.QUOTA_CHECK],
        audit_dlq_url=state.resources.audit_dlq_url,
    )
    assert {k: quota_env[k] for k in expected} == expected
    assert quota_env["AWS_ENDPOINT_URL"] == state.endpoint("moto")
    assert quota_env["AWS_ENDPOINT_URL_BEDROCK_AGENTCORE"] == state.endpoint("interpreter")
    assert quota_env["AWS_ENDPOINT_URL_LAMBDA"] == state.endpoint("lambda")
    assert "SANDBOX_LOCAL_DIR" not in quota_env and "PYTEST_CURRENT_TEST" not in quota_env


def test_scoped_alias_refuses_an_out_of_scope_tenant_with_one_audit_row_and_nothing_counted(
    state: LocalState,
) -> None:
    from sandbox_common.agent_scope import alias_for

    from tests.support.stack import event

    # Given the local stage's agent scoped to acme, served through dispatch's alias scope_acme
    # (the emulator resolves the aliases the stage declares and reports the invoked ARN)
    lam = state.client("lambda")
    alias = f"{state.resources.functions[n.DISPATCH]}:{alias_for('acme')}"
    target = local_target(state)

    def invoke(body: dict) -> dict:
        out = lam.invoke(FunctionName=alias, Payload=json.dumps(body).encode())
        assert out["ExecutedVersion"] == "$LATEST" and "FunctionError" not in out
        return json.loads(out["Payload"].read())

    def counted(tenant: str) -> int:
        table = state.resources.tables[n.TENANT_DAILY_COUNTERS.logical]
        items = state.client("dynamodb").scan(TableName=table)["Items"]
        return sum(1 for i in items if i.get(n.COUNTER_ATTR_TENANT, {}).get("S") == tenant)

    before = counted("globex")
    # When it sends globex's execute_code (and begin_turn) through that alias
    refused = invoke(event(tenant_id="globex", turn_id="scope-t", call_id="scope-c", agent_id="scoped"))
    begun = invoke(event("begin_turn", tenant_id="globex", turn_id="scope-t2", agent_id="scoped"))
    # Then the call is refused as SandboxProvisioning, out of scope
    assert refused["ok"] is False and refused["error"] == "SandboxProvisioning", refused
    assert refused["reason"] == n.REASON_OUT_OF_SCOPE and refused["exit_status"] == "provisioning"
    assert begun["sandbox"]["status"] == "disabled" and begun["sandbox"]["reason"] == n.REASON_OUT_OF_SCOPE
    # And it left exactly one audit row, counted nothing, and started no session
    rows = [r for r in records_ops.audit_list(target, tenant_id="globex") if r.get("call_id") == "scope-c"]
    assert len(rows) == 1
    assert rows[0]["exit_status"] == "provisioning" and rows[0]["failure_reason"] == n.REASON_OUT_OF_SCOPE
    assert rows[0]["invocation_id"] == refused["invocation_id"] and not rows[0].get("session_id")
    assert counted("globex") == before
    # And the same alias serves the tenant in its scope (the alias itself works)
    allowed = invoke(event(turn_id="scope-t3", call_id="scope-c3", agent_id="scoped"))
    assert allowed["ok"] is True and allowed["stdout"] == "2\n", allowed
    invoke(event("end_turn", turn_id="scope-t3"))


def _kill(process: dict) -> None:
    os.killpg(process["pgid"], 9)
    while process_alive(process["pid"], process["marker"]):
        time.sleep(0.02)


def test_up_restarts_dead_parts_keeping_state_and_down_leaves_no_process_behind(stack_dir: Path) -> None:
    # (last test of the module: it restarts parts of, then stops, the module's stack)
    # Given the stack holds emulated AWS state, and its interpreter and Lambda emulator died
    tmp_path = stack_dir
    first = read_state(stack_dir)
    assert first is not None
    first.client("ssm").put_parameter(Name="/issue10/kept", Type="String", Value="still here")
    old = first.data["processes"]
    _kill(old["interpreter"])
    _kill(old["lambda"])
    assert stack.status(tmp_path)["running"] is False
    # When `up` runs again
    current, started = stack.up(tmp_path)
    # Then only the dead parts were restarted, on their old endpoints, and moto's state is intact
    now = current.data["processes"]
    assert started is True and stack.status(tmp_path)["running"] is True
    assert now["moto"]["pid"] == old["moto"]["pid"]
    assert (
        now["interpreter"]["pid"] != old["interpreter"]["pid"]
        and now["lambda"]["pid"] != old["lambda"]["pid"]
    )
    assert {k: p["endpoint"] for k, p in now.items()} == {k: p["endpoint"] for k, p in old.items()}
    assert current.client("ssm").get_parameter(Name="/issue10/kept")["Parameter"]["Value"] == "still here"

    # Given moto itself died (its in-memory state is gone with it), and a call arrives meanwhile
    _kill(now["moto"])
    event = {
        "action": "execute_code",
        "tenant_id": "acme",
        "agent_id": "spool-probe",
        "template_id": "analyst",
        "turn_id": "t-spool",
        "call_id": "c-spool",
        "code": "print(1)",
        "turn_token": "s" * 43,
    }
    out = current.client("lambda").invoke(
        FunctionName=current.resources.functions[n.DISPATCH], Payload=json.dumps(event).encode()
    )
    answer = json.loads(out["Payload"].read())
    # Then the agent gets a structured refusal and the audit row waits in the local spool
    assert answer["ok"] is False
    spool = tmp_path / n.LOCAL_AUDIT_SPOOL_FILE
    (spooled,) = [json.loads(line) for line in spool.read_text().splitlines()]
    assert spooled["call_id"] == "c-spool" and spooled["tenant_id"] == "acme"
    # When `up` runs again
    current, started = stack.up(tmp_path)
    # Then the stack is started clean: every part is new
    fresh = current.data["processes"]
    assert started is True and stack.status(tmp_path)["running"] is True
    assert all(fresh[k]["pid"] != now[k]["pid"] for k in stack.COMPONENTS)
    # and `audit replay` writes the spooled row into the new stack's table, exactly once
    assert records_ops.audit_replay(local_target(current)) == {
        "replayed": 1,
        "duplicates": 0,
        "invalid": 0,
        "failed": 0,
    }
    row = current.client("dynamodb").get_item(
        TableName=current.resources.tables[n.INVOCATIONS.logical],
        Key={n.INVOCATIONS.pk: {"S": spooled["invocation_id"]}},
    )["Item"]
    assert row["call_id"] == {"S": "c-spool"} and spool.read_text() == ""

    # Given the new stack has a warm Lambda worker and an interpreter session
    current.client("lambda").invoke(
        FunctionName=current.resources.functions[n.QUOTA_CHECK],
        Payload=json.dumps({"tenant_id": "acme", "agent_id": "down-probe"}).encode(),
    )
    agentcore = current.client("bedrock-agentcore")
    agentcore.start_code_interpreter_session(
        codeInterpreterIdentifier=n.interpreter_name("local", "acme", "default-public")
    )
    pgids = [p["pgid"] for p in current.data["processes"].values()]
    pids = [p["pid"] for p in current.data["processes"].values()]
    everything = {d for pid in pids for d in stack.descendants(pid)} | set(pids)
    assert len(everything) > 4  # three components + a Lambda worker + the session's process
    # When it is brought down
    result = stack.down(tmp_path)
    # Then every process it started (also those outside its process groups) is gone, and the state file too
    assert {s["component"] for s in result["stopped"]} == set(stack.COMPONENTS)
    assert all(stack.group_members(g) == [] for g in pgids)
    assert [p for p in everything if pid_alive(p)] == []
    assert read_state(tmp_path) is None
    assert stack.status(tmp_path)["running"] is False


def test_start_up_wait_names_the_last_log_line_of_a_part_that_exits(tmp_path: Path) -> None:
    # Given a part that writes a line and exits before it answers HTTP
    process = stack._spawn(
        tmp_path, "broken", [sys.executable, "-c", "print('port 1 is taken', flush=True)", "broken-part"], {}
    )
    # When start-up waits for it / Then the wait ends with the part's last words, not a timeout
    with pytest.raises(LocalStackError, match="exited during start-up: port 1 is taken"):
        stack._wait_http("http://127.0.0.1:9/", process, time.time() + 120)


def test_start_up_wait_keeps_waiting_while_the_child_has_not_exec_ed_yet(tmp_path: Path) -> None:
    # Given our own live process whose command line does not (yet) hold the part's marker, as a
    # child shows between fork and exec on a loaded machine
    process = {"pid": os.getpid(), "marker": "no-such-marker", "log": str(tmp_path / "x.log")}
    # When start-up waits on an address that never answers, for a short while
    # Then it is not reported as exited: it waits until its deadline
    with pytest.raises(LocalStackError, match="did not answer"):
        stack._wait_http("http://127.0.0.1:9/", process, time.time() + 0.5)
