"""Programmatic tool calling inside the sandbox (docs/tool-calling.md): the code that runs INSIDE
the interpreter.

STDLIB ONLY and self-contained: `tools_protocol.installer_source()` ships this file's source into
the Code Interpreter with the readiness preamble (the interpreter cannot import our packages),
where it is executed as the private module `_sbx_tools_runtime` and registers the public module
`sandbox_tools`. It is importable on the host too, so tests exercise the very same code.

Design (why threads): AgentCore and the local interpreter both run every `executeCode` call to
completion in ONE persistent Python process. To pause user code at a tool call and continue it
in a *later* executeCode call, the user code runs in a worker thread of that process:

- the host sends a tiny driver expression (`start(...)`) carrying the user code base64-encoded;
  `start` decodes it, compiles it as its own cell and runs it in the session's globals on a
  worker thread, then *drives* it: waits until the thread either finishes or blocks in a tool
  call;
- `sandbox_tools.tools.<name>(**kwargs)` (on the worker thread) registers the call and blocks on
  an event; the driver then writes one marker line (MARKER + upper-case hex of a JSON state) as
  the LAST line of the call's stdout and returns — the executeCode call ends, the thread stays
  parked with its whole stack (no replay: nothing that ran is run again);
- a later `resume(...)` driver sets the call's result or error, releases the thread and drives
  it again to the next tool call or to the end. At the end the driver re-raises the user code's
  exception (if any) so the interpreter reports it exactly as for ordinary code (exit code,
  traceback on stderr, MemoryError -> oom, SystemExit -> its code).

While a slice runs, sys.stdout / sys.stderr are relays: writes from any thread but the driver
are queued and written by the driver thread. Kernels that route a thread's output to the cell
that started the thread (ipykernel ≥ 7) would otherwise send a resumed slice's output to an
earlier, finished call; with the relay every byte of a slice is written by the thread of the
call that is running. (fd-level output — subprocesses — is captured by the interpreter as usual.)

The marker is upper-case hex so that no redaction rule (all lower-case prefixes, `AKIA`/`ASIA`,
`Bearer`, dotted JWTs, lower-case hex of registered values) can rewrite it on its way out. The
host strips it before counting or redacting stdout, and validates everything it says (names
against the allowlist, call count, sequence): the sandbox is not trusted.
"""

import ast
import base64
import json
import linecache
import sys
import threading
import time
import types

MARKER = "__SANDBOX_TOOLS__ "
PUBLIC_MODULE = "sandbox_tools"
PRIVATE_MODULE = "_sbx_tools_runtime"
CALL_START_MODULE = "_sbx_call"  # sandbox_common.naming.CALL_START_MODULE (this file imports nothing of ours)
PUMP_SECONDS = 0.05
WORKER_STACK_BYTES = 8 << 20  # the main thread's usual stack: deep user recursion behaves the same

STATE_TOOL_CALL = "tool_call"
STATE_DONE = "done"
STATE_IDLE = "idle"
STATE_BUSY = "busy"


class ToolError(Exception):
    """A tool failed: its message is the tool's error message (or why the call was refused)."""


class ToolNotAllowed(ToolError, AttributeError):
    """The name is not on this template's tool allowlist: raised without any round trip."""


class ToolCallLimit(ToolError):
    """This execute_code already made its maximum number of tool calls."""


class _Call:
    __slots__ = ("seq", "name", "payload", "released", "result", "error")

    def __init__(self, seq, name, payload):
        self.seq = seq
        self.name = name
        self.payload = payload  # the input as compact JSON text
        self.released = threading.Event()
        self.result = None
        self.error = None


class _Run:
    """One execute_code's user code, possibly parked on a tool call."""

    def __init__(self, allow, max_calls, max_input_bytes):
        self.allow = frozenset(allow)
        self.max_calls = max_calls
        self.max_input_bytes = max_input_bytes
        self.calls = 0
        self.pending = None
        self.finished = False
        self.exc = None
        self.changed = threading.Event()
        self.call_lock = threading.Lock()  # one pending call at a time, whatever thread calls
        self.thread = None


_STATE = {"run": None, "cell": 0, "last_calls": None}  # last_calls: tool calls of the run that ended last


class _Relay:
    """sys.stdout / sys.stderr during a slice: only the driver thread writes to the real stream."""

    def __init__(self, target, queue, driver):
        self._target = target
        self._queue = queue
        self._driver = driver

    def write(self, s):
        if threading.get_ident() == self._driver:
            return self._target.write(s)
        self._queue.append((self._target, s))  # list.append: atomic, keeps the order of writes
        return len(s) if isinstance(s, str) else 0

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        if threading.get_ident() == self._driver:
            self._target.flush()

    def __getattr__(self, name):
        return getattr(self._target, name)


def _pump(queue):
    while queue:
        target, text = queue.pop(0)
        try:
            target.write(text)
        except Exception:  # the user replaced a stream with something broken: never kill the driver
            pass


def _call_tool(name, kwargs):
    run = _STATE["run"]
    if run is None or run.finished or threading.get_ident() == _main_ident():
        raise ToolError("sandbox_tools can only be used in code the sandbox runs with tools enabled")
    if name not in run.allow:
        raise ToolNotAllowed(_not_allowed(name, run.allow))
    try:
        payload = json.dumps(kwargs, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ToolError(f"tool input is not JSON-serializable: {exc}") from None
    size = len(payload.encode("utf-8", "surrogatepass"))
    if size > run.max_input_bytes:
        raise ToolError(f"tool input is {size} bytes, over the {run.max_input_bytes}-byte limit")
    with run.call_lock:
        if run.calls >= run.max_calls:
            raise ToolCallLimit(f"this execute_code already made {run.max_calls} tool calls, the maximum")
        run.calls += 1
        call = _Call(run.calls, name, payload)
        run.pending = call
        run.changed.set()
        call.released.wait()
    if call.error is not None:
        raise ToolError(call.error)
    return call.result


def _main_ident():
    return threading.main_thread().ident


def _not_allowed(name, allow):
    listed = ", ".join(sorted(allow)) or "none"
    return f"tool {name!r} is not available to this code (allowed: {listed})"


class _Tools:
    """`sandbox_tools.tools`: one function per allowlisted tool, keyword arguments only."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        run = _STATE["run"]
        allow = run.allow if run is not None else frozenset()
        if name not in allow:
            raise ToolNotAllowed(_not_allowed(name, allow))

        def tool(**kwargs):
            return _call_tool(name, kwargs)

        tool.__name__ = tool.__qualname__ = name
        return tool

    def __dir__(self):
        run = _STATE["run"]
        return sorted(run.allow) if run is not None else []

    def call(self, name, **kwargs):
        """For tool names that are not Python identifiers."""
        run = _STATE["run"]
        if run is None or name not in run.allow:
            raise ToolNotAllowed(_not_allowed(name, run.allow if run is not None else frozenset()))
        return _call_tool(name, kwargs)


tools = _Tools()


def _user_traceback(tb):
    """Drop the runtime's own frames: the traceback starts where the user's code does."""
    own = _body.__code__.co_filename
    while tb is not None and tb.tb_frame.f_code.co_filename == own:
        tb = tb.tb_next
    return tb


def _body(run, code, namespace, filename):
    try:
        tree = ast.parse(code, filename=filename, mode="exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(body=tree.body.pop().value)
        exec(compile(tree, filename, "exec"), namespace)
        if last is not None:
            value = eval(compile(last, filename, "eval"), namespace)
            sys.displayhook(value)
    except BaseException as exc:  # reported by the driver exactly as the interpreter would
        run.exc = exc.with_traceback(_user_traceback(exc.__traceback__))
    finally:
        run.finished = True
        run.changed.set()


def _emit(state):
    text = json.dumps(state, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
    out = sys.stdout
    try:
        out.flush()
    except Exception:
        pass
    out.write("\n" + MARKER + text.hex().upper() + "\n")
    out.flush()


def _drive(run):
    queue = []
    driver = threading.get_ident()
    saved = (sys.stdout, sys.stderr)
    relays = (_Relay(saved[0], queue, driver), _Relay(saved[1], queue, driver))
    sys.stdout, sys.stderr = relays
    try:
        while not run.changed.wait(PUMP_SECONDS):
            _pump(queue)
        run.changed.clear()
    finally:
        if sys.stdout is relays[0]:
            sys.stdout = saved[0]
        if sys.stderr is relays[1]:
            sys.stderr = saved[1]
        _pump(queue)
    if run.finished:
        _STATE["run"] = None
        _STATE["last_calls"] = run.calls
        _emit({"state": STATE_DONE, "calls": run.calls})
        exc, run.exc = run.exc, None
        if exc is not None:
            raise exc
        return None
    call = run.pending
    _emit({"state": STATE_TOOL_CALL, "seq": call.seq, "name": call.name, "input": call.payload})
    return None


def _mark_call_start():
    """Record when this call started, on the session's clock: the artifact collector returns the
    files changed under outputs/ since then with this call, not with a background job."""
    module = sys.modules.get(CALL_START_MODULE)
    if module is None:
        module = types.ModuleType(CALL_START_MODULE)
        sys.modules[CALL_START_MODULE] = module
    module.started_ns = time.time_ns()


def start(code_b64, config, namespace):
    """Run user code (base64 of its UTF-8 bytes) with tools; drive it to a tool call or the end."""
    current = _STATE["run"]
    if current is not None and not current.finished:
        _emit({"state": STATE_BUSY, "seq": current.pending.seq if current.pending else 0})
        return None
    _mark_call_start()
    code = base64.b64decode(code_b64).decode("utf-8")
    run = _Run(config.get("allow", ()), int(config["max_calls"]), int(config["max_input_bytes"]))
    _STATE["cell"] += 1
    filename = f"<tools-cell-{_STATE['cell']}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    _STATE["run"] = run
    _STATE["last_calls"] = None
    previous = threading.stack_size()
    try:
        threading.stack_size(WORKER_STACK_BYTES)
    except (ValueError, RuntimeError):  # a platform that refuses the size: keep its default
        previous = None
    try:
        run.thread = threading.Thread(
            target=_body, args=(run, code, namespace, filename), name="sandbox-tools-run", daemon=True
        )
        run.thread.start()
    finally:
        if previous is not None:
            threading.stack_size(previous)
    return _drive(run)


def resume(seq, kind, payload_hex):
    """Answer the pending tool call `seq` (kind "result": hex of its JSON; "error": hex of the
    message) and drive the code to its next tool call or the end."""
    run = _STATE["run"]
    call = run.pending if run is not None and not run.finished else None
    if call is None or call.seq != seq:
        _emit({"state": STATE_IDLE if run is None else STATE_BUSY, "seq": call.seq if call else 0})
        return None
    text = bytes.fromhex(payload_hex).decode("utf-8")
    if kind == "result":
        call.result = json.loads(text)
    else:
        call.error = text
    run.pending = None
    run.changed.clear()
    call.released.set()
    return _drive(run)


def status():
    """Print the state marker alone (the host asks when a slice's own marker did not reach it)."""
    run = _STATE["run"]
    if run is not None and not run.finished and run.pending is not None:
        call = run.pending
        _emit({"state": STATE_TOOL_CALL, "seq": call.seq, "name": call.name, "input": call.payload})
    elif run is None and _STATE["last_calls"] is not None:  # the last slice ended the code
        _emit({"state": STATE_DONE, "calls": _STATE["last_calls"]})
    else:
        _emit({"state": STATE_IDLE if run is None else STATE_BUSY, "seq": 0})


def install():
    """Register the public `sandbox_tools` module (idempotent)."""
    public = types.ModuleType(PUBLIC_MODULE)
    public.__doc__ = (
        "Call this agent's allowlisted tools: `from sandbox_tools import tools; tools.NAME(**kwargs)`."
    )
    public.tools = tools
    public.ToolError = ToolError
    public.ToolNotAllowed = ToolNotAllowed
    public.ToolCallLimit = ToolCallLimit
    public.__all__ = ["tools", "ToolError", "ToolNotAllowed", "ToolCallLimit"]
    sys.modules[PUBLIC_MODULE] = public
    return True


def installed():
    return PUBLIC_MODULE in sys.modules and getattr(sys.modules[PUBLIC_MODULE], "tools", None) is tools
