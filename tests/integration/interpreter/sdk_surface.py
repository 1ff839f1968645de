"""Every public call of the official `bedrock-agentcore` SDK's CodeInterpreter client, unpatched,
against a Code Interpreter endpoint; prints one JSON report: each check, passed or not, and the
totals.

    BEDROCK_AGENTCORE_DP_ENDPOINT=http://127.0.0.1:PORT BEDROCK_AGENTCORE_CP_ENDPOINT=... \\
    AWS_REGION=us-east-1 python tests/integration/interpreter/sdk_surface.py WHEEL_DIR

The SDK is pointed at the endpoint with its own configuration (the endpoint variables it reads at
import, the region) — never by patching it. WHEEL_DIR holds `lci_probe` wheels (1.0 and 2.0) that
`install_packages` installs through a pip configuration file uploaded into the session, so the
run needs no package index. Checks of what the local interpreter does not offer are listed in
UNSUPPORTED with the reason; they run too, and are reported apart.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bedrock_agentcore.tools.code_interpreter_client import DEFAULT_IDENTIFIER, CodeInterpreter, code_session

REGION = "us-east-1"
CUSTOM = sys.argv[2] if len(sys.argv) > 2 else DEFAULT_IDENTIFIER
# check name -> why the local interpreter does not offer it
UNSUPPORTED = {
    "create_code_interpreter": "control plane: local interpreters come from the stage configuration",
    "get_code_interpreter": "control plane: local interpreters come from the stage configuration",
    "list_code_interpreters": "control plane: local interpreters come from the stage configuration",
    "delete_code_interpreter": "control plane: local interpreters come from the stage configuration",
}

results: list[dict[str, Any]] = []


def check(name: str, fn: Callable[[], Any]) -> None:
    try:
        outcome = fn()
        ok, detail = (outcome, "") if isinstance(outcome, bool) else (bool(outcome[0]), str(outcome[1]))
    except Exception as exc:  # a check that raises failed; say how
        ok, detail = False, f"{type(exc).__name__}: {exc}"[:300]
    results.append({"check": name, "ok": ok, "detail": detail[:300], "supported": name not in UNSUPPORTED})


def last(response: dict[str, Any]) -> dict[str, Any]:
    """The terminal result event of an invoke response."""
    events = [e["result"] for e in response["stream"] if "result" in e]
    return events[-1]


def structured(response: dict[str, Any]) -> dict[str, Any]:
    return dict(last(response).get("structuredContent") or {})


def wait_task(ci: CodeInterpreter, task_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        state = structured(ci.invoke("getTask", {"taskId": task_id}))
        if state.get("taskStatus") != "working" or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


def main() -> None:
    wheels = Path(sys.argv[1])
    ci = CodeInterpreter(REGION)
    check("client construct", lambda: (ci.session_id is None and ci.identifier is None, ci.region))
    check("stop without a session", lambda: ci.stop() is True)
    check(
        "invoke starts a session",
        lambda: (structured(ci.invoke("executeCode", {"code": "1"})), ci.session_id),
    )
    check("identifier is the default", lambda: (ci.identifier == DEFAULT_IDENTIFIER, ci.identifier))
    ci.stop()

    with code_session(REGION) as s:
        check("code_session default identifier", lambda: (s.identifier == DEFAULT_IDENTIFIER, s.identifier))
        check("session_id set", lambda: bool(s.session_id))
        check("get_session", lambda: (s.get_session()["status"] == "READY", s.get_session()["status"]))
        check(
            "get_session explicit ids",
            lambda: (
                s.get_session(interpreter_id=s.identifier, session_id=s.session_id)["sessionId"]
                == s.session_id
            ),
        )
        check("list_sessions", lambda: s.session_id in {i["sessionId"] for i in s.list_sessions()["items"]})
        check(
            "list_sessions READY",
            lambda: all(i["status"] == "READY" for i in s.list_sessions(status="READY")["items"]),
        )
        check(
            "invoke executeCode",
            lambda: structured(s.invoke("executeCode", {"code": "print(1)"}))["stdout"] == "1\n",
        )
        check("execute_code stdout", lambda: structured(s.execute_code("print(6 * 7)"))["stdout"] == "42\n")
        s.execute_code("kept = 5")
        check(
            "execute_code state persists",
            lambda: structured(s.execute_code("print(kept)"))["stdout"] == "5\n",
        )
        check(
            "execute_code clear_context",
            lambda: "NameError" in structured(s.execute_code("print(kept)", clear_context=True))["stderr"],
        )
        s.execute_code("again = 1")
        check("clear_context", lambda: last(s.clear_context())["isError"] is False)
        check("context cleared", lambda: "NameError" in structured(s.execute_code("again"))["stderr"])
        check(
            "execute_code error is isError",
            lambda: (
                last(s.execute_code("1 / 0"))["isError"] is True
                and structured(s.execute_code("1 / 0"))["exitCode"] == 1
            ),
        )
        check(
            "execute_code trailing expression",
            lambda: structured(s.execute_code("x = 20\nx * 3"))["stdout"] == "60\n",
        )
        check(
            "executionTime in milliseconds",
            lambda: structured(s.execute_code("import time; time.sleep(0.2)"))["executionTime"] >= 200,
        )
        check(
            "execute_code javascript",
            lambda: structured(s.execute_code("console.log(1)", language="javascript"))["stdout"] == "1\n",
        )
        check(
            "execute_code typescript",
            lambda: structured(s.execute_code("console.log(1)", language="typescript"))["stdout"] == "1\n",
        )
        check(
            "execute_code invalid language refused", lambda: _raises(ValueError, s.execute_code, "x", "cobol")
        )
        check(
            "execute_command python --version",
            lambda: (structured(s.execute_command("python --version"))["stdout"].startswith("Python 3."), ""),
        )
        check("execute_command echo", lambda: structured(s.execute_command("echo hi"))["stdout"] == "hi\n")
        check("execute_command exit status", lambda: structured(s.execute_command("exit 4"))["exitCode"] == 4)
        check(
            "execute_command same interpreter as code",
            lambda: (
                structured(s.execute_command("python -c 'import sys; print(sys.executable)'"))[
                    "stdout"
                ].strip()
                == structured(s.execute_code("import sys; print(sys.executable)"))["stdout"].strip()
            ),
        )
        # install_packages: pip reads the user's configuration file, uploaded like any file
        s.upload_file(".config/pip/pip.conf", "[global]\nno-index = true\nfind-links = /workspace/wheels\n")
        s.upload_files(
            [{"path": f"wheels/{w.name}", "content": w.read_bytes()} for w in sorted(wheels.glob("*.whl"))]
        )
        check(
            "install_packages",
            lambda: (structured(s.install_packages(["lci_probe==1.0"]))["exitCode"] == 0, "installed"),
        )
        check(
            "installed package importable in code",
            lambda: structured(s.execute_code("import lci_probe; print(lci_probe.VALUE)"))["stdout"] == "1\n",
        )
        check(
            "install_packages upgrade",
            lambda: (
                structured(s.install_packages(["lci_probe"], upgrade=True))["exitCode"] == 0
                and structured(s.execute_command("python -c 'import lci_probe; print(lci_probe.VALUE)'"))[
                    "stdout"
                ]
                == "2\n"
            ),
        )
        check(
            "install_packages invalid name refused",
            lambda: _raises(ValueError, s.install_packages, ["x; rm"]),
        )
        check("install_packages empty refused", lambda: _raises(ValueError, s.install_packages, []))
        check(
            "upload_file text",
            lambda: last(s.upload_file("data/a.csv", "x,y\n1,2\n", description="d"))["isError"] is False,
        )
        check("upload_file description kept", lambda: s._file_descriptions.get("data/a.csv") == "d")
        check(
            "upload_file bytes",
            lambda: last(s.upload_file("data/b.bin", b"\x00\xff\x10"))["isError"] is False,
        )
        check("upload_file absolute path refused", lambda: _raises(ValueError, s.upload_file, "/etc/x", "x"))
        check(
            "upload_files",
            lambda: (
                last(
                    s.upload_files([{"path": "m/1.txt", "content": "1"}, {"path": "m/2.txt", "content": "2"}])
                )["isError"]
                is False
            ),
        )
        check("download_file text", lambda: s.download_file("data/a.csv") == "x,y\n1,2\n")
        check("download_file binary", lambda: s.download_file("data/b.bin") == b"\x00\xff\x10")
        check(
            "download_files",
            lambda: s.download_files(["m/1.txt", "m/2.txt"]) == {"m/1.txt": "1", "m/2.txt": "2"},
        )
        check("download_file missing", lambda: _raises(FileNotFoundError, s.download_file, "nope.txt"))
        check(
            "invoke listFiles",
            lambda: (
                {b["name"] for b in last(s.invoke("listFiles", {"directoryPath": "m"}))["content"]}
                == {"1.txt", "2.txt"}
            ),
        )
        check(
            "invoke removeFiles",
            lambda: (
                last(s.invoke("removeFiles", {"paths": ["m/1.txt"]}))["isError"] is False
                and {b["name"] for b in last(s.invoke("listFiles", {"directoryPath": "m"}))["content"]}
                == {"2.txt"}
            ),
        )
        check(
            "invoke writeFiles and readFiles",
            lambda: (
                last(s.invoke("writeFiles", {"content": [{"path": "w.txt", "text": "w"}]}))["isError"]
                is False
                and last(s.invoke("readFiles", {"paths": ["w.txt"]}))["content"][0]["resource"]["text"] == "w"
            ),
        )
        started = structured(s.invoke("startCommandExecution", {"command": "echo bg; sleep 0.3; echo end"}))
        check("invoke startCommandExecution", lambda: (bool(started.get("taskId")), started))
        check(
            "invoke getTask",
            lambda: (lambda t: (t["taskStatus"] == "completed" and t["stdout"] == "bg\nend\n", t))(
                wait_task(s, started["taskId"])
            ),
        )
        long_task = structured(s.invoke("startCommandExecution", {"command": "sleep 600"}))
        check(
            "invoke stopTask",
            lambda: (
                structured(s.invoke("stopTask", {"taskId": long_task["taskId"]}))["taskStatus"] == "canceled"
            ),
        )
        session_id = s.session_id
    check(
        "code_session stops its session",
        lambda: CodeInterpreter(REGION).get_session(DEFAULT_IDENTIFIER, session_id)["status"] == "TERMINATED",
    )

    custom = CodeInterpreter(REGION)
    check(
        "start custom identifier, name, timeout",
        lambda: bool(custom.start(identifier=CUSTOM, name="surface", session_timeout_seconds=120)),
    )
    check("get_session name", lambda: custom.get_session().get("name") == "surface")
    check("stop", lambda: custom.stop() is True and custom.session_id is None)
    with code_session(REGION, identifier=CUSTOM) as own:
        check("code_session custom identifier", lambda: own.identifier == CUSTOM)

    cp = CodeInterpreter(REGION)
    check("create_code_interpreter", lambda: bool(cp.create_code_interpreter("x", "arn:aws:iam::1:role/r")))
    check("get_code_interpreter", lambda: bool(cp.get_code_interpreter("x")))
    check("list_code_interpreters", lambda: bool(cp.list_code_interpreters()))
    check("delete_code_interpreter", lambda: bool(cp.delete_code_interpreter("x")))

    supported = [r for r in results if r["supported"]]
    print(
        json.dumps(
            {
                "checks": results,
                "passed": sum(r["ok"] for r in results),
                "total": len(results),
                "supported_passed": sum(r["ok"] for r in supported),
                "supported_total": len(supported),
                "unsupported": UNSUPPORTED,
            }
        )
    )


def _raises(kind: type[BaseException], fn: Callable[..., Any], *args: Any) -> bool:
    try:
        fn(*args)
    except kind:
        return True
    return False


if __name__ == "__main__":
    main()
