"""The local stack: moto server, local interpreter, Lambda emulator, and the egress
proxy with the local package index it routes to (infra/local/egress.py), as detached background
processes, plus the stage's resources created in moto.

State lives in one JSON file under the state directory (`.local/` in the repo, or
`$SANDBOX_LOCAL_DIR`): pids, endpoints, resource names; `infra.local.state` reads it. `up` is
idempotent (a healthy stack is reused), `down` stops exactly the process groups `up` started (each
component is started as its own session leader, so its Lambda workers and interpreter sessions go
with it), `status` reports them. `sandboxctl local ...` and `python -m infra.demo` are the callers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox_common import aws
from sandbox_common.naming import ENV_LOCAL_UNISOLATED, ENV_SESSION_PYTHON

from infra.local.state import (
    FAKE_CREDENTIALS,
    LOCAL_REGION,
    REPO_ROOT,
    STATE_FILE,
    LocalResources,
    LocalStackError,
    LocalState,
    all_running,
    pid_alive,
    process_alive,
    read_state,
    state_dir,
)

if TYPE_CHECKING:
    from infra.cdk.function_env import EgressEndpoints
    from infra.local.egress import EgressPlan

COMPONENTS = ("moto", "interpreter", "lambda", "egress", "index")
START_TIMEOUT_SECONDS = 60


def _write_state(directory: Path, data: dict[str, Any]) -> None:
    tmp = directory / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    tmp.replace(directory / STATE_FILE)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Serialize up/down on one state directory (two `up`s must not start two stacks)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- processes -------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _proc_table() -> dict[int, tuple[str, int, int]]:
    """pid -> (state, ppid, pgid) of every process visible in /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        table[int(entry.name)] = (fields[0], int(fields[1]), int(fields[2]))
    return table


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`."""
    return sorted(pid for pid, (st, _, group) in _proc_table().items() if st != "Z" and group == pgid)


def descendants(pid: int) -> list[int]:
    """Live descendants of `pid` (also those that left its process group, e.g. sandboxed
    interpreter sessions that start their own session)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for child, (_, ppid, _) in table.items():
        children.setdefault(ppid, []).append(child)
    found, todo = [], list(children.get(pid, []))
    while todo:
        current = todo.pop()
        if table[current][0] != "Z":
            found.append(current)
        todo.extend(children.get(current, []))
    return sorted(found)


def _spawn(directory: Path, name: str, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    log = directory / f"{name}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(REPO_ROOT),
            start_new_session=True,  # own process group: `down` stops it and all its children
        )
    proc.returncode = 0  # detached on purpose: never waited for by this (short-lived) process
    # argv and env are kept in the state file so `up` can restart this one part alone.
    return {"pid": proc.pid, "pgid": proc.pid, "marker": argv[2], "log": str(log), "argv": argv, "env": env}


def _wait_http(url: str, process: dict[str, Any], deadline: float, context: Any = None) -> None:
    while time.time() < deadline:
        # pid_alive, not process_alive: between fork and exec the child's command line is still
        # the parent's, and a loaded machine can show that; our child that exits stays a zombie
        # (never reaped here), so its pid cannot be recycled while we wait
        if not pid_alive(process["pid"]):
            tail = Path(process["log"]).read_text(errors="replace")[-600:].strip().splitlines()
            raise LocalStackError(
                f"{process['marker']} exited during start-up: {(tail or ['no output'])[-1]}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2, context=context):
                return
        except urllib.error.HTTPError:
            return  # it answers HTTP: up
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise LocalStackError(f"{process['marker']} did not answer on {url} within {START_TIMEOUT_SECONDS}s")


def session_runtime_env() -> dict[str, str]:
    """Sessions run on the pinned session runtime (`make session-runtime`) when it
    is built; without it they run on the host's base Python (no pandas/matplotlib)."""
    from sandbox_common.naming import SESSION_VENV_DIR

    python = REPO_ROOT / SESSION_VENV_DIR / "bin" / "python"
    return {ENV_SESSION_PYTHON: str(python)} if python.exists() else {}


def _base_env() -> dict[str, str]:
    # + the local interpreter's isolation settings (escape hatch, session Python)
    keep = (
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "TMPDIR",
        "PYTHONDONTWRITEBYTECODE",
        ENV_LOCAL_UNISOLATED,
        ENV_SESSION_PYTHON,
    )
    env = {k: os.environ[k] for k in keep if k in os.environ}
    return {**env, **FAKE_CREDENTIALS, "AWS_REGION": LOCAL_REGION, "AWS_DEFAULT_REGION": LOCAL_REGION}


def _stop_group(process: dict[str, Any], timeout: float = 10.0) -> None:
    """SIGTERM the component's process group (it shuts its children down), then SIGKILL
    whatever it started that is still alive — by pid, only processes that descend from it."""
    pid, pgid = int(process["pid"]), int(process["pgid"])
    ours = process_alive(pid, process["marker"])
    tracked = set(group_members(pgid)) | (set(descendants(pid)) | {pid} if ours else set())
    if not tracked:
        return
    if ours:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.time() + timeout
    while time.time() < deadline:
        tracked = {p for p in tracked if pid_alive(p)} | set(group_members(pgid))
        if not tracked:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    for leftover in tracked:
        with contextlib.suppress(ProcessLookupError):
            os.kill(leftover, signal.SIGKILL)


# --- public API ------------------------------------------------------------------------------
def status(directory: Path | None = None) -> dict[str, Any]:
    state = read_state(directory)
    if state is None:
        return {"running": False, "state_dir": str(directory or state_dir()), "processes": {}}
    alive = state.alive()
    processes = {name: {**proc, "alive": alive[name]} for name, proc in state.data["processes"].items()}
    interpreter = processes.get("interpreter")
    return {
        "running": all_running(alive),
        "state_dir": str(state.directory),
        "stage": state.data["stage"],
        "processes": processes,
        "isolation": (
            interpreter_isolation(interpreter["endpoint"]) if interpreter and interpreter["alive"] else None
        ),
        # The interpreter ids the local AgentCore serves (from the state file).
        "interpreters": [i["id"] for i in state.data.get("resources", {}).get("interpreters", [])],
        # The egress proxy's address, its CA certificate, the package index sessions use (None:
        # the stack runs without a proxy, so allowlist sessions cannot start).
        "egress": state.data.get("egress"),
    }


def interpreter_isolation(endpoint: str) -> dict[str, Any] | None:
    """The isolation the local interpreter enforces (its GET /_local/isolation), None if it does not
    answer."""
    try:
        with urllib.request.urlopen(f"{endpoint}/_local/isolation", timeout=5) as answer:
            return dict(json.loads(answer.read()))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def up(
    directory: Path | None = None, *, stage: str = "local", max_concurrency: int = 4
) -> tuple[LocalState, bool]:
    """Start the stack, or reuse a healthy one. Returns (state, started_now)."""
    directory = directory or state_dir()
    with _locked(directory):
        current = status(directory)
        if current["running"]:
            state = read_state(directory)
            assert state is not None
            if state.data["stage"] != stage:
                raise LocalStackError(
                    f"a local stack for stage {state.data['stage']!r} is running in {directory}; run `local"
                    " down` first"
                )
            return state, False
        if current["processes"]:
            # A part died. While the emulated AWS (moto) lives, restart only the dead parts on
            # their old ports: audit rows, counters and overrides are kept, and every endpoint
            # the others know stays valid. Otherwise stop what is left and start clean.
            restarted = _restart_dead_parts(directory, current, stage)
            if restarted is not None:
                return restarted, True
            _down_locked(directory)
        try:
            return _start(directory, stage, max_concurrency), True
        except BaseException:
            _down_locked(directory)
            raise


def _health_url(component: str, endpoint: str) -> str:
    # Imported here like the other start-up modules: `sandboxctl` commands that never start a
    # stack do not pay for the emulator's imports.
    from infra.local.lambda_emulator import HEALTH_PATH

    # the egress proxy answers any request without a credential (407): it is up
    paths = {"moto": "/moto-api/", "interpreter": "/ping", "lambda": HEALTH_PATH, "egress": "/", "index": "/"}
    return endpoint + paths[component]


def _health_context(component: str) -> Any:
    """The index serves HTTPS for its own name; its liveness is asked on loopback, unverified."""
    import ssl

    return ssl._create_unverified_context() if component == "index" else None  # noqa: S323


def _restart_dead_parts(directory: Path, current: dict[str, Any], stage: str) -> LocalState | None:
    """Restart the dead interpreter and/or Lambda emulator of a stack whose moto is alive, each
    with its recorded command line (same port). None when that is not possible (moto dead, a
    state from before argv was recorded, another stage, a port taken): the caller starts clean."""
    state = read_state(directory)
    processes = current["processes"]
    if (
        state is None
        or state.data.get("stage") != stage
        or "resources" not in state.data
        or not set(processes) <= set(COMPONENTS)
        or "moto" not in processes
        or not processes["moto"]["alive"]
        or any("argv" not in p for p in state.data["processes"].values())
    ):
        return None
    deadline = time.time() + START_TIMEOUT_SECONDS
    for name in COMPONENTS:
        if name not in processes or processes[name]["alive"]:
            continue
        old = state.data["processes"][name]
        _stop_group(old)  # whatever the dead part left behind (its sessions, its workers)
        fresh = _spawn(directory, name, list(old["argv"]), dict(old["env"]))
        fresh["endpoint"] = old["endpoint"]
        state.data["processes"][name] = fresh
        _write_state(directory, state.data)
        try:
            _wait_http(_health_url(name, fresh["endpoint"]), fresh, deadline, _health_context(name))
        except LocalStackError:
            return None
    return state


def down(directory: Path | None = None) -> dict[str, Any]:
    directory = directory or state_dir()
    with _locked(directory):
        return _down_locked(directory)


def _down_locked(directory: Path) -> dict[str, Any]:
    state = read_state(directory)
    if state is None:
        return {"stopped": []}
    from concurrent.futures import ThreadPoolExecutor

    processes = state.data["processes"]
    with ThreadPoolExecutor(max(1, len(processes))) as pool:  # independent groups: stop them together
        list(pool.map(_stop_group, processes.values()))
    stopped = [{"component": name, "pid": process["pid"]} for name, process in processes.items()]
    (directory / STATE_FILE).unlink(missing_ok=True)
    return {"stopped": stopped}


def _start(directory: Path, stage: str, max_concurrency: int) -> LocalState:
    from infra.cdk.config import build_config
    from infra.local import egress
    from infra.local.resources import create_resources

    config = build_config(stage)
    deadline = time.time() + START_TIMEOUT_SECONDS
    data: dict[str, Any] = {
        "stage": stage,
        "region": LOCAL_REGION,
        "started_at": time.time(),
        "processes": {},
    }
    env = _base_env()

    # 1. moto
    port = _free_port()
    # moto serving one request at a time: DynamoDB's per-item atomicity under concurrent calls
    # (moto's threaded server lets conditional writes interleave; see infra/local/moto_serial.py)
    moto = _spawn(
        directory, "moto", [sys.executable, "-m", "infra.local.moto_serial", "--port", str(port)], env
    )
    moto["endpoint"] = f"http://127.0.0.1:{port}"
    data["processes"]["moto"] = moto
    _write_state(directory, data)

    # 2. the egress proxy's CA, the local index's wheels and certificate, the test routes: made
    # before the parts that are given their paths start (infra/local/egress.py)
    plan = egress.prepare(
        directory,
        proxy_port=_free_port(),
        index_port=_free_port(),
        test=egress.read_test_routes(),
    )
    data["egress"] = plan.state() if plan is not None else None

    # 3. the local AgentCore interpreter (started now, in parallel with moto's start-up)
    interp = _start_interpreter(directory, config, moto["endpoint"], plan, env)
    data["processes"]["interpreter"] = interp
    _write_state(directory, data)

    # 4. the local package index and the egress proxy (it reads moto's tables per request)
    if plan is not None:
        data["processes"].update(_start_egress(directory, stage, plan, moto["endpoint"], env))
        _write_state(directory, data)

    # 5. resources, from the same definitions as the CDK stacks
    _wait_http(f"{moto['endpoint']}/moto-api/", moto, deadline)
    state = LocalState(directory, data)
    resources = create_resources(config, lambda service: _moto_client(moto["endpoint"], service))
    data["resources"] = resources.to_dict()
    _wait_http(f"{interp['endpoint']}/ping", interp, deadline)
    for name in ("index", "egress"):
        if name in data["processes"]:
            part = data["processes"][name]
            _wait_http(_health_url(name, part["endpoint"]), part, deadline, _health_context(name))

    # 6. the Lambda emulator; each function gets exactly its CDK environment + local endpoints
    endpoints = {"moto": moto["endpoint"], "interpreter": interp["endpoint"]}
    emu = _start_lambda(directory, config, resources, endpoints, plan, env, max_concurrency)
    data["processes"]["lambda"] = emu
    _write_state(directory, data)
    from infra.local.lambda_emulator import HEALTH_PATH

    _wait_http(f"{emu['endpoint']}{HEALTH_PATH}", emu, deadline)
    return state


def _start_interpreter(
    directory: Path, config: Any, moto_endpoint: str, plan: EgressPlan | None, env: dict[str, str]
) -> dict[str, Any]:
    """The local interpreter with the stage's interpreters registered (ids and network modes come
    from the config alone), each tenant's sessions reading its data from moto as its role would
    (s3relay.py), VPC sessions given the egress proxy when there is one."""
    from sandbox_common import naming as n

    from infra.local.interpreter.s3relay import grants_to_json
    from infra.local.resources import data_grants

    port = _free_port()
    registrations = [
        f"--interpreter={n.interpreter_name(config.name, t.id, e)}={n.NETWORK_MODE[e]}"
        for t in config.tenants
        for e in t.environments
    ]
    grants_file = directory / "data-grants.json"
    grants_file.write_text(grants_to_json(data_grants(config, moto_endpoint)), encoding="utf-8")
    interp = _spawn(
        directory,
        "interpreter",
        [
            sys.executable,
            "-m",
            "infra.local.interpreter",
            "--port",
            str(port),
            f"--data-grants={grants_file}",
            *(
                ["--egress-proxy", plan.proxy_address, "--egress-ca-cert", str(plan.ca_cert)]
                if plan is not None
                else []
            ),
            *registrations,
        ],
        {**session_runtime_env(), **env},  # an operator's own SANDBOX_SESSION_PYTHON wins
    )
    interp["endpoint"] = f"http://127.0.0.1:{port}"
    return interp


def _start_egress(
    directory: Path, stage: str, plan: EgressPlan, moto_endpoint: str, env: dict[str, str]
) -> dict[str, dict[str, Any]]:
    """The local package index and the egress proxy, by component name."""
    from sandbox_common import naming as n

    from infra.local import egress

    index = _spawn(directory, "index", egress.index_argv(plan, sys.executable), env)
    index["endpoint"] = f"https://127.0.0.1:{plan.index_port}"
    tables = {spec.logical: spec.physical(stage) for spec in n.ALL_TABLES}
    proxy = _spawn(
        directory,
        "egress",
        egress.proxy_argv(plan, stage, tables),
        egress.proxy_env(env, moto_endpoint),
    )
    proxy["endpoint"] = f"http://{plan.proxy_address}"
    return {"index": index, "egress": proxy}


def _start_lambda(
    directory: Path,
    config: Any,
    resources: LocalResources,
    endpoints: dict[str, str],
    plan: EgressPlan | None,
    env: dict[str, str],
    max_concurrency: int,
) -> dict[str, Any]:
    """The Lambda emulator, each function with its CDK environment and the local endpoints
    (`endpoints`: moto's and the interpreter's)."""
    from sandbox_common import naming as n

    from infra.local.interpreter.egress import session_endpoints

    port = _free_port()
    lambda_endpoint = f"http://127.0.0.1:{port}"
    function_endpoints = {
        "AWS_ENDPOINT_URL": endpoints["moto"],
        "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE": endpoints["interpreter"],
        "AWS_ENDPOINT_URL_LAMBDA": lambda_endpoint,
        # The audit writer's last resort while the emulated AWS (table and DLQ) is down.
        n.ENV_AUDIT_SPOOL: str(directory / n.LOCAL_AUDIT_SPOOL_FILE),
        **FAKE_CREDENTIALS,
        "AWS_REGION": LOCAL_REGION,
        "AWS_DEFAULT_REGION": LOCAL_REGION,
    }
    functions = lambda_function_specs(
        config,
        resources,
        function_endpoints,
        max_concurrency=max_concurrency,
        # how allowlist sessions see the proxy, its CA and the index (none without a proxy)
        egress=session_endpoints(n.LOCAL_PACKAGE_INDEX_URL) if plan is not None else None,
    )
    emulator_config = directory / "lambda-functions.json"
    emulator_config.write_text(
        json.dumps(
            {
                "region": LOCAL_REGION,
                "account": resources.account,
                "functions": functions,
                "schedules": lambda_schedules(resources),
            },
            indent=2,
        )
    )
    emu = _spawn(
        directory,
        "lambda",
        [
            sys.executable,
            "-m",
            "infra.local.lambda_emulator",
            "--port",
            str(port),
            "--config",
            str(emulator_config),
        ],
        env,
    )
    emu["endpoint"] = lambda_endpoint
    return emu


def lambda_function_specs(
    config: Any,
    resources: LocalResources,
    endpoints: dict[str, str],
    *,
    max_concurrency: int = 4,
    egress: EgressEndpoints | None = None,
) -> list[dict[str, Any]]:
    """The emulator's function definitions: handler and environment exactly as the CDK stack
    defines them (`function_environment`, the same builder), plus the local endpoints; `egress`:
    where allowlist sessions see the local egress proxy (interpreter/egress.py)."""
    from sandbox_common import naming as n

    from infra.cdk.constructs.definitions import dispatch_aliases, function_timeout_seconds
    from infra.cdk.function_env import function_environment

    specs = []
    for logical in n.FUNCTIONS:
        cdk_env = function_environment(
            config,
            logical,
            tables=resources.tables,
            quota_function_name=resources.functions[n.QUOTA_CHECK],
            audit_dlq_url=resources.audit_dlq_url,
            artifacts_bucket=resources.artifacts_bucket,
            egress=egress,
        )
        specs.append(
            {
                "name": resources.functions[logical],
                "handler": n.handler_string(logical),
                "environment": {**cdk_env, **endpoints},
                "timeout_seconds": function_timeout_seconds(config, logical),
                "max_concurrency": max_concurrency,
                # the aliases the stage declares (agent scopes), as the CDK stack creates them
                "aliases": list(dispatch_aliases(config)) if logical == n.DISPATCH else [],
            }
        )
    return specs


def lambda_schedules(resources: LocalResources) -> list[dict[str, Any]]:
    """The scheduled rules of the CDK app, run by the emulator: the session reaper every
    `limits.REAPER_SCHEDULE_MINUTES` (SANDBOX_LOCAL_REAPER_SECONDS overrides it, for tests)."""
    from sandbox_common import limits
    from sandbox_common import naming as n

    rate = float(os.environ.get("SANDBOX_LOCAL_REAPER_SECONDS") or limits.REAPER_SCHEDULE_MINUTES * 60)
    return [{"function": resources.functions[n.REAPER], "rate_seconds": rate}]


def _moto_client(endpoint: str, service: str) -> Any:
    return aws.new_client(
        service,
        endpoint_url=endpoint,
        region_name=LOCAL_REGION,
        aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )
