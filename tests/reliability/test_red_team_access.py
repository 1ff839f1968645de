"""Red team of who may do what (docs/agent-access.md, docs/egress.md's CLI) and of the front door's
newest parts (docs/jobs.md, JavaScript and TypeScript in docs/tool-surface.md), on a local stack
started as a user starts it:

- a malicious agent scoped to `acme` (it invokes dispatch's `scope_acme` alias) acting for `globex`
  through every action, with the qualifier spelled every way an invoke can spell it, and with
  another agent's ids (turn, token, job, file) inside its own scope;
- a careless operator feeding `sandboxctl egress set` and `secrets put` what they must refuse;
- a program in a session printing a token through Node.js in every way Node can write, and a
  background JavaScript job stopped at its own timeout.

Every test records one row of the report's "Red team" section.
"""

from __future__ import annotations

import json
import secrets
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.red_team import RedStack, red_stack

SCOPE = "scope_acme"  # the local stage's scoped agent: tenants ["acme"]
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # a shape every redaction layer knows


@pytest.fixture(scope="module")
def red(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedStack]:
    with red_stack(tmp_path_factory.mktemp("red-access"), names=["api.partner.test"]) as stack:
        yield stack


@pytest.fixture(scope="module")
def victim(red: RedStack) -> Iterator[dict[str, Any]]:
    """globex's own turn (its agent is unscoped): a file it produced, a job still running."""
    turn = red.turn("globex", "analyst", agent_id="globex-agent")
    assert turn.begun["sandbox"]["status"] == "ready", turn.begun
    made = turn.run(
        "import os\nos.makedirs('outputs', exist_ok=True)\n"
        "open('outputs/private.txt', 'w').write('globex-private-data')\nprint('made')"
    )
    assert made["ok"] is True and made["files"], made
    job = turn.run("import time\ntime.sleep(300)", background=True)
    assert job["status"] == "running", job
    yield {"turn": turn, "file_id": made["files"][0]["file_id"], "job_id": job["job_id"]}
    turn.dispatch("cancel_job", job_id=job["job_id"])
    turn.end()


def _refused(answer: dict[str, Any]) -> bool:
    """A refusal of the scope: the invoke itself refused (an alias that does not exist), or
    dispatch's SandboxProvisioning `tenant_out_of_scope` (begin_turn: status disabled)."""
    if "invoke_error" in answer:
        return True
    sandbox = answer.get("sandbox") or {}
    return (
        answer.get("error") == "SandboxProvisioning" and answer.get("reason") == "tenant_out_of_scope"
    ) or (sandbox.get("status") == "disabled" and sandbox.get("reason") == "tenant_out_of_scope")


def _victim_intact(red: RedStack, victim: dict[str, Any]) -> None:
    turn = victim["turn"]
    job = turn.dispatch("get_job", job_id=victim["job_id"])
    assert job.get("status") == "running", job
    still = turn.run("print(open('outputs/private.txt').read())")
    assert still["stdout"].strip() == "globex-private-data", still


# --- a scoped agent acting for another tenant ------------------------------------------------------
def _actions(victim: dict[str, Any]) -> dict[str, dict[str, Any]]:
    turn = victim["turn"]
    ids = {"tenant_id": "globex", "turn_id": turn.turn_id, "turn_token": turn.token}
    agent = {"agent_id": "acme-agent"}
    return {
        "begin_turn": {"action": "begin_turn", **ids, **agent, "template_id": "analyst"},
        "execute_code": {
            "action": "execute_code",
            **ids,
            **agent,
            "template_id": "analyst",
            "call_id": f"{turn.turn_id}-evil",
            "code": "print(open('outputs/private.txt').read())",
        },
        "execute_code background": {
            "action": "execute_code",
            **ids,
            **agent,
            "template_id": "analyst",
            "call_id": f"{turn.turn_id}-evil-job",
            "code": "print(1)",
            "background": True,
        },
        "get_file": {"action": "get_file", "tenant_id": "globex", "file_id": victim["file_id"]},
        "get_job": {"action": "get_job", **ids, **agent, "job_id": victim["job_id"]},
        "cancel_job": {"action": "cancel_job", **ids, **agent, "job_id": victim["job_id"]},
        "resume": {"action": "resume", **ids, **agent, "continuation": "A" * 43, "tool_result": 1},
        "end_turn": {"action": "end_turn", **ids},
        "sweep_paused_calls": {"action": "sweep_paused_calls"},
    }


ACTIONS = [
    "begin_turn",
    "execute_code",
    "execute_code background",
    "get_file",
    "get_job",
    "cancel_job",
    "resume",
    "end_turn",
    "sweep_paused_calls",
]


@pytest.mark.parametrize("action", ACTIONS)
def test_red_scoped_agent_acting_for_another_tenant_is_refused_by_every_action(
    red: RedStack, victim: dict[str, Any], action: str, record: Any
) -> None:
    event = _actions(victim)[action]
    # When the acme-scoped agent sends globex's request (with globex's real ids) through its alias
    answer = red.dispatch(event, qualifier=SCOPE)
    record(
        "red_team",
        attack=f"scope_acme alias, tenant globex: {action}",
        surface="agent scope",
        observed=answer.get("reason")
        or (answer.get("sandbox") or {}).get("reason")
        or json.dumps(answer)[:80],
        finding="",
    )
    # Then refused, and globex's turn, job and files are as they were
    assert _refused(answer), answer
    assert "globex-private-data" not in json.dumps(answer)
    _victim_intact(red, victim)


def test_red_refused_execute_code_leaves_one_row_and_counts_nothing(
    red: RedStack, victim: dict[str, Any], record: Any
) -> None:
    turn = victim["turn"]
    call_id = f"{turn.turn_id}-counted-{secrets.token_hex(3)}"
    event = {**_actions(victim)["execute_code"], "call_id": call_id}
    answer = red.dispatch(event, qualifier=SCOPE)
    rows = [r for r in red.rows_of_turn(turn.turn_id) if r.get("call_id") == call_id]
    record(
        "red_team",
        attack="scope_acme alias, tenant globex: execute_code's audit",
        surface="agent scope",
        observed=f"{len(rows)} row(s), {[r.get('failure_reason') for r in rows]}",
        finding="",
    )
    assert _refused(answer)
    assert len(rows) == 1 and rows[0]["failure_reason"] == "tenant_out_of_scope", rows


QUALIFIERS = {
    # (how the agent names the function, how it passes a Qualifier) -> must it be refused?
    "scope_ACME": ("{fn}:scope_ACME", None),
    "Scope_acme": ("{fn}:Scope_acme", None),
    "scope_globex (not granted, not an alias)": ("{fn}:scope_globex", None),
    "scope_": ("{fn}:scope_", None),
    "scope_acme_": ("{fn}:scope_acme_", None),
    "a version number": ("{fn}:1", None),
    "two qualifiers": ("{fn}:scope_acme:scope_acme", None),
    "full ARN with the alias": ("{arn}:scope_acme", None),
    "partial ARN with the alias": ("{account}:function:{fn}:scope_acme", None),
    "Qualifier parameter": ("{fn}", "scope_acme"),
    "Qualifier disagreeing with the name's": ("{fn}:scope_acme", "$LATEST"),
}


@pytest.mark.parametrize("spelling", list(QUALIFIERS))
def test_red_scope_alias_spelled_otherwise_never_acts_for_another_tenant(
    red: RedStack, victim: dict[str, Any], spelling: str, record: Any
) -> None:
    name_template, qualifier = QUALIFIERS[spelling]
    account = red.state.resources.account
    fn = red.function
    name = name_template.format(
        fn=fn, arn=f"arn:aws:lambda:us-east-1:{account}:function:{fn}", account=account
    )
    event = _actions(victim)["get_job"]
    kwargs: dict[str, Any] = {"FunctionName": name, "Payload": json.dumps(event).encode()}
    if qualifier is not None:
        kwargs["Qualifier"] = qualifier
    try:
        out = red.lambda_client.invoke(**kwargs)
        answer = dict(json.loads(out["Payload"].read()))
    except red.lambda_client.exceptions.ClientError as exc:
        answer = {"invoke_error": exc.response["Error"]["Code"]}
    record(
        "red_team",
        attack=f"dispatch invoked as {spelling}, tenant globex",
        surface="agent scope (Lambda emulator)",
        observed=answer.get("invoke_error") or answer.get("reason") or answer.get("status") or "",
        finding="",
    )
    # Then either the invoke is refused (no such qualifier) or the scope refuses the tenant: never
    # globex's job
    assert _refused(answer), answer


def _outcome(answer: dict[str, Any]) -> Any:
    sandbox = answer.get("sandbox") or {}
    return answer.get("error") or answer.get("status") or sandbox.get("status") or answer.get("ok")


def test_red_another_agents_ids_inside_its_own_scope_reach_nothing_of_theirs(
    red: RedStack, victim: dict[str, Any], record: Any
) -> None:
    turn = victim["turn"]
    ids = {"tenant_id": "acme", "turn_id": turn.turn_id, "turn_token": turn.token, "agent_id": "acme-agent"}
    # When the acme-scoped agent uses globex's turn id, token, call id, job id and file id as acme's
    seen = {
        "begin_turn": red.dispatch(
            {"action": "begin_turn", **ids, "template_id": "analyst"}, qualifier=SCOPE
        ),
        "execute_code": red.dispatch(
            {
                "action": "execute_code",
                **ids,
                "template_id": "analyst",
                "call_id": f"{turn.turn_id}-1",
                "code": "print(open('outputs/private.txt').read())",
            },
            qualifier=SCOPE,
        ),
        "get_file": red.dispatch(
            {"action": "get_file", "tenant_id": "acme", "file_id": victim["file_id"]}, qualifier=SCOPE
        ),
        "get_job": red.dispatch({"action": "get_job", **ids, "job_id": victim["job_id"]}, qualifier=SCOPE),
        "cancel_job": red.dispatch(
            {"action": "cancel_job", **ids, "job_id": victim["job_id"]}, qualifier=SCOPE
        ),
        "end_turn": red.dispatch(
            {"action": "end_turn", **{k: ids[k] for k in ("tenant_id", "turn_id", "turn_token")}},
            qualifier=SCOPE,
        ),
    }
    record(
        "red_team",
        attack="another agent's turn, token, call, job and file ids used as the own tenant's",
        surface="dispatch",
        observed=", ".join(f"{k}: {_outcome(v)}" for k, v in seen.items()),
        finding="",
    )
    # Then nothing of globex's comes back, and globex's turn, job and file are untouched
    assert "globex-private-data" not in json.dumps(seen)
    assert seen["get_file"].get("error") == "SandboxInvalidRequest"
    assert seen["get_job"].get("error") == "SandboxInvalidRequest"
    assert seen["cancel_job"].get("error") == "SandboxInvalidRequest"
    _victim_intact(red, victim)


def test_red_another_agent_of_the_same_tenant_reaches_nothing_of_its_turn(
    red: RedStack, victim: dict[str, Any], record: Any
) -> None:
    turn = victim["turn"]
    other = red.turn("globex", "analyst", agent_id="globex-other")
    assert other.begun["sandbox"]["status"] == "ready", other.begun
    job_id = victim["job_id"]
    theirs = {"tenant_id": "globex", "turn_id": turn.turn_id}
    mine = {"turn_token": other.token, "agent_id": "globex-other"}
    code = "print(open('outputs/private.txt').read())"
    # When globex's other agent uses the first agent's job id from its own turn, the first agent's
    # turn id with its own token, and the first agent's turn id and token under its own agent id
    seen = {
        "own turn: get_job": other.dispatch("get_job", job_id=job_id),
        "own turn: cancel_job": other.dispatch("cancel_job", job_id=job_id),
        "their turn, own token: get_job": red.dispatch(
            {"action": "get_job", **theirs, **mine, "job_id": job_id}
        ),
        "their turn, own token: execute_code": red.dispatch(
            {
                "action": "execute_code",
                **theirs,
                **mine,
                "template_id": "analyst",
                "call_id": f"{turn.turn_id}-other",
                "code": code,
            }
        ),
        "their turn, own token: end_turn": red.dispatch(
            {"action": "end_turn", **theirs, "turn_token": other.token}
        ),
        "their turn and token, own agent id: get_job": red.dispatch(
            {
                "action": "get_job",
                **theirs,
                "turn_token": turn.token,
                "agent_id": "globex-other",
                "job_id": job_id,
            }
        ),
        "their turn and token, own agent id: cancel_job": red.dispatch(
            {
                "action": "cancel_job",
                **theirs,
                "turn_token": turn.token,
                "agent_id": "globex-other",
                "job_id": job_id,
            }
        ),
    }
    other.end()
    record(
        "red_team",
        attack="another agent of the same tenant: the first agent's job id, turn id and token",
        surface="dispatch",
        observed=", ".join(f"{k}: {_outcome(v)}" for k, v in seen.items()),
        finding="",
    )
    # Then each is refused, nothing of the first agent's comes back, and its turn, job and files
    # are as they were
    assert all(a.get("ok") is not True and a.get("error") for a in seen.values()), seen
    assert "globex-private-data" not in json.dumps(seen)
    _victim_intact(red, victim)


def test_red_the_agent_client_raises_the_scope_refusal(red: RedStack, record: Any) -> None:
    from sandbox_client import SandboxProvisioning, SandboxTurn

    turn = SandboxTurn(
        f"{red.function}:{SCOPE}",
        tenant_id="globex",
        agent_id="acme-agent",
        template_id="analyst",
        lambda_client=red.lambda_client,
    )
    with pytest.raises(SandboxProvisioning) as raised:
        turn.execute_code("print(1)")
    record(
        "red_team",
        attack="sandbox_client through scope_acme for globex",
        surface="agent client",
        observed=f"{type(raised.value).__name__} ({getattr(raised.value, 'reason', '')})",
        finding="",
    )


# --- a careless operator ----------------------------------------------------------------------------
EGRESS_SET_REFUSALS = {
    "a bare *": ("--allow", "*"),
    "a top-level suffix": ("--allow", "*.com"),
    "the metadata address": ("--allow", "169.254.169.254"),
    "an IPv6 literal": ("--allow", "[::1]"),
    "a hex address": ("--allow", "0x7f000001"),
    "a one-label name": ("--allow", "localhost"),
    "a URL for a host": ("--allow", "https://api.partner.test"),
    "a path": ("--allow", "api.partner.test/v1"),
    "port 0": ("--allow", "api.partner.test:0"),
    "port 65536": ("--allow", "api.partner.test:65536"),
    "a named port": ("--allow", "api.partner.test:https"),
    "a Unicode name": ("--allow", "bücher.partner.test"),
    "userinfo": ("--allow", "api.partner.test@evil.test"),
    "a credential for a host not allowed": (
        "--allow",
        "open.partner.test",
        "--credential",
        "api.partner.test=Authorization:Bearer {secret:crm-token}",
    ),
    "a credential over plain HTTP": (
        "--allow",
        "api.partner.test:80",
        "--credential",
        "api.partner.test=Authorization:Bearer {secret:crm-token}",
    ),
    "a secret the tenant lacks": (
        "--allow",
        "api.partner.test",
        "--credential",
        "api.partner.test=Authorization:Bearer {secret:globex-token}",
    ),
    "a reserved header": (
        "--allow",
        "api.partner.test",
        "--credential",
        "api.partner.test=Host:{secret:crm-token}",
    ),
    "a template without a secret": (
        "--allow",
        "api.partner.test",
        "--credential",
        "api.partner.test=Authorization:Bearer abc",
    ),
    "a secret name with a path": (
        "--allow",
        "api.partner.test",
        "--credential",
        "api.partner.test=Authorization:{secret:../globex/globex-token}",
    ),
    "a package with a marker": ("--packages", "sandbox-hello; os_name=='posix'"),
    "a package with a URL": ("--packages", "sandbox-hello @ https://evil.test/x.whl"),
    # 100 rules (the most a policy has) of long names: past the 8 KB an SSM parameter holds, which
    # AWS refuses and moto stores
    "a policy past an SSM parameter's 8 KB": tuple(
        arg for i in range(100) for arg in ("--allow", f"{'a' * 60}.{i:03d}{'b' * 20}.partner.test")
    ),
}


@pytest.fixture(scope="module")
def operator(red: RedStack) -> RedStack:
    for tenant, name, value in (
        ("acme", "crm-token", "tok-" + secrets.token_hex(12)),
        ("globex", "globex-token", "tok-" + secrets.token_hex(12)),
    ):
        out = red.ctl("secrets", "put", "--tenant", tenant, name, stdin=value)
        assert out.returncode == 0, out.stderr
    out = red.ctl(
        "egress",
        "set",
        "--tenant",
        "acme",
        "--environment",
        "default-allowlist",
        "--allow",
        "api.partner.test",
        "--credential",
        "api.partner.test=Authorization:Bearer {secret:crm-token}",
    )
    assert out.returncode == 0, out.stderr
    return red


@pytest.mark.parametrize("case", list(EGRESS_SET_REFUSALS))
def test_red_egress_set_refuses_bad_input_and_changes_nothing(
    operator: RedStack, case: str, record: Any
) -> None:
    before = operator.policy("acme")
    out = operator.ctl(
        "egress", "set", "--tenant", "acme", "--environment", "default-allowlist", *EGRESS_SET_REFUSALS[case]
    )
    after = operator.policy("acme")
    record(
        "red_team",
        attack=f"sandboxctl egress set with {case}",
        surface="sandboxctl",
        observed=f"exit {out.returncode}: {out.stderr.strip()[:90]}",
        finding="low: stored locally (moto sets no limit), refused by a stage's SSM"
        if "8 KB" in case
        else "",
    )
    assert out.returncode in (1, 2) and "Traceback" not in out.stderr, (out.returncode, out.stderr)
    assert after == before


@pytest.mark.parametrize(
    "args",
    [
        (
            "egress",
            "set",
            "--tenant",
            "nosuch",
            "--environment",
            "default-allowlist",
            "--allow",
            "api.partner.test",
        ),
        (
            "egress",
            "set",
            "--tenant",
            "acme",
            "--environment",
            "default-public",
            "--allow",
            "api.partner.test",
        ),
        (
            "egress",
            "set",
            "--tenant",
            "canary",
            "--environment",
            "default-allowlist",
            "--allow",
            "api.partner.test",
        ),
        ("egress", "set", "--tenant", "acme", "--environment", "nope", "--allow", "api.partner.test"),
        ("egress", "show", "--session", "../../etc/passwd"),
    ],
    ids=[
        "unknown tenant",
        "a public environment",
        "an environment the tenant lacks",
        "unknown environment",
        "a path as a session",
    ],
)
def test_red_egress_cli_refuses_scopes_it_has_no_policy_for(
    operator: RedStack, args: tuple[str, ...], record: Any
) -> None:
    before = operator.policy("acme")
    out = operator.ctl(*args)
    record(
        "red_team",
        attack=f"sandboxctl {' '.join(args[:2])}: {' '.join(args[2:6])}",
        surface="sandboxctl",
        observed=f"exit {out.returncode}: {out.stderr.strip()[:90]}",
        finding="low: a policy was stored for an environment the tenant does not have"
        if "canary" in args
        else "",
    )
    assert out.returncode in (1, 2) and "Traceback" not in out.stderr, out.stderr
    assert operator.policy("acme") == before


SECRET_REFUSALS = {
    "a value of two lines": "tok-first-line-123\r\nX-Injected: yes",
    "a line feed inside": "tok-first\nsecond-line",
    "a NUL": "tok-abcdefgh\0ijk",
    "a short value": "abc",
    "an empty value": "",
}


@pytest.mark.parametrize("case", list(SECRET_REFUSALS))
def test_red_secrets_put_refuses_values_the_proxy_cannot_send(
    operator: RedStack, case: str, record: Any
) -> None:
    name = "refused-" + secrets.token_hex(3)
    out = operator.ctl("secrets", "put", "--tenant", "acme", name, stdin=SECRET_REFUSALS[case])
    names = json.loads(operator.ctl("--json", "secrets", "list", "--tenant", "acme").stdout)["secrets"]
    record(
        "red_team",
        attack=f"sandboxctl secrets put with {case}",
        surface="sandboxctl",
        observed=f"exit {out.returncode}: {out.stderr.strip()[:90]}",
        finding="medium: a value with a line break was stored, then split the request it was written into"
        if "line" in case
        else "",
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr, (out.returncode, out.stderr)
    assert name not in names


@pytest.mark.parametrize(
    "name",
    [
        "../globex/globex-token",
        "globex-token/../../globex/globex-token",
        "Crm-Token",
        "-x",
        "a" * 65,
        "crm token",
    ],
)
def test_red_secrets_put_refuses_names_that_are_not_one_plain_name(
    operator: RedStack, name: str, record: Any
) -> None:
    def listed(tenant: str) -> list[str]:
        out = operator.ctl("--json", "secrets", "list", "--tenant", tenant)
        return list(json.loads(out.stdout)["secrets"])

    before = {tenant: listed(tenant) for tenant in ("acme", "globex")}
    # When the operator puts acme's secret under a name with a path, capitals, a leading dash,
    # 65 characters or a space
    out = operator.ctl("secrets", "put", "--tenant", "acme", name, stdin="tok-" + secrets.token_hex(12))
    after = {tenant: listed(tenant) for tenant in ("acme", "globex")}
    record(
        "red_team",
        attack=f"sandboxctl secrets put named {name[:40]!r}",
        surface="sandboxctl",
        observed=f"exit {out.returncode}: {out.stderr.strip()[:90]}",
        finding="",
    )
    # Then it is refused in one line and neither tenant's secrets changed (the store read directly:
    # `secrets list` shows only well-formed names)
    stored = [
        entry["Name"]
        for page in operator.state.client("secretsmanager").get_paginator("list_secrets").paginate()
        for entry in page["SecretList"]
    ]
    assert out.returncode in (1, 2) and "Traceback" not in out.stderr, (out.returncode, out.stderr)
    assert after == before
    assert not [entry for entry in stored if entry.endswith(name)], stored


# --- JavaScript and TypeScript at the front door --------------------------------------------------------
JS_LEAKS = f"""
const T = {TOKEN[:10]!r} + {TOKEN[10:]!r};
const fs = require('fs');
const cp = require('child_process');
process.stdout.write(T.slice(0, 9));
process.stdout.write(T.slice(9) + "\\n");
process.stdout.write(Buffer.from("buffer:" + T + "\\n"));
process.stdout.write(new Uint8Array(Buffer.from("bytes:" + T + "\\n")));
console.log("log:", T);
console.error("error:" + T);
console.warn({{warn: T}});
console.log(JSON.stringify({{t: T}}));
fs.writeSync(1, "fd1:" + T + "\\n");
fs.writeSync(2, "fd2:" + T + "\\n");
fs.writeSync(fs.openSync('/dev/stdout', 'w'), "devstdout:" + T + "\\n");
console.log(cp.execSync("echo child:" + T).toString().trim());
cp.spawnSync('sh', ['-c', 'echo spawned:' + T + '; echo spawned-err:' + T + ' >&2'], {{stdio: 'inherit'}});
fs.mkdirSync('outputs', {{recursive: true}});
fs.writeFileSync('outputs/js-token.txt', "file:" + T + "\\n");
process.stdout.write("x".repeat(65530) + T.slice(0, 12));
setTimeout(() => {{ process.stdout.write(T.slice(12) + "\\nlate\\n"); }}, 300);
"""


def _fetch_file(red: RedStack, tenant: str, file_id: str) -> bytes:
    answer = red.dispatch({"action": "get_file", "tenant_id": tenant, "file_id": file_id})
    assert answer.get("ok") is True, answer
    with urllib.request.urlopen(answer["url"], timeout=30) as response:
        return bytes(response.read())


@pytest.mark.parametrize("language", ["javascript", "typescript"])
def test_red_a_token_node_writes_any_way_leaves_redacted(red: RedStack, language: str, record: Any) -> None:
    turn = red.turn("acme", "analyst")
    code = JS_LEAKS
    if language == "typescript":  # an ES module: imports, and a type to strip
        code = "import * as fs from 'fs';\nimport * as cp from 'child_process';\n" + JS_LEAKS.replace(
            "const T =", "const T: string ="
        ).replace("const fs = require('fs');\n", "").replace("const cp = require('child_process');\n", "")
    answer = turn.run(code, language=language)
    files = [_fetch_file(red, "acme", f["file_id"]) for f in answer.get("files", [])]
    turn.end()
    everything = json.dumps(answer) + "".join(f.decode("utf-8", "replace") for f in files)
    leaked = TOKEN in everything or TOKEN[4:20] in everything
    record(
        "red_team",
        attack=f"{language}: a token by split writes, Buffers, console.*, fd writes, child processes, a file",
        surface="front door (Node.js)",
        observed="redacted everywhere" if not leaked else "token in the answer",
        finding="",
    )
    assert answer.get("ok") is True, answer
    assert answer["stdout"].count("<redacted>") >= 10 and "late" in answer["stdout"], answer["stdout"][-400:]
    assert files and b"<redacted>" in files[0]
    assert not leaked


JOB_PROGRAMS = {
    "javascript": (
        f"const T = {TOKEN[:10]!r} + {TOKEN[10:]!r};\n"
        "process.stdout.write('job said: ' + T.slice(0, 12));\n"
        "setTimeout(() => process.stdout.write(T.slice(12) + ' and then kept running'), 200);\n"
        "setInterval(() => {}, 1000);\n"
    ),
    "bash": (
        f"T={TOKEN[:10]}{TOKEN[10:]}\n"
        "printf 'job said: %s' \"${T:0:12}\"; sleep 0.2; printf '%s and then kept running' \"${T:12}\"\n"
        "sleep 300\n"
    ),
}


@pytest.mark.parametrize("language", list(JOB_PROGRAMS))
def test_red_a_job_stopped_at_its_timeout_keeps_its_output_so_far(
    red: RedStack, language: str, record: Any
) -> None:
    turn = red.turn("acme", "analyst")
    # Given a background job that writes (a token among it, no line end) and then never ends
    submitted, final = turn.job(JOB_PROGRAMS[language], language=language, timeout_s=4)
    turn.end()
    record(
        "red_team",
        attack=f"a {language} job stopped at its timeout_s",
        surface="front door (jobs)",
        observed=f"{final.get('status')}, stdout {final.get('stdout')!r}",
        finding="low: what the job wrote last (held by the redactor) was lost with the job",
    )
    # Then it is timed out, its output so far is in its answer, redacted
    assert final["status"] == "timed_out" and final.get("exit_code") is None, final
    assert TOKEN not in json.dumps(final)
    assert final["stdout"] == "job said: <redacted> and then kept running", final["stdout"]
