"""JavaScript and TypeScript INSIDE the session: a Node.js program run as a child of the session's
Python process, its output relayed through that process's `sys.stdout` / `sys.stderr`.

STDLIB ONLY and self-contained, like the rest of `sandbox_session`: the session runner ships this
file's source with each JavaScript or TypeScript call (`sandbox_runtime.runner.programs`), the
job runtime writes it into the session beside its own, and the local interpreter's worker loads
it for the AgentCore SDK's own `executeCode` of `javascript` / `typescript`. It does not import the
shell runtime (`sandbox_session.shell`): whoever runs a program hands that module in, and its
`run` starts, feeds, relays and stops Node.js exactly as it does bash.

As AgentCore's `nodejs` runtime runs them: JavaScript as a CommonJS program, TypeScript as an
ECMAScript module. Each call is a fresh Node.js process in the session's working directory and
environment (the same files as Python and bash; no variables survive between calls), reading its
program from a pipe on stdin (`node -`, never an argument, which Linux caps at 128 KiB), in a
process group of its own that a deadline stops with everything it started. `require` and `import`
resolve from the working directory.

Why through the Python process: the in-session redactor (the readiness preamble's: the first
redaction layer, docs/redaction.md) wraps `sys.stdout` / `sys.stderr` of the session's
interpreter. Node writes to its pipes, which are read here and written as text into those streams,
so every byte a program prints passes the same redactor as Python output — a token split across
two `process.stdout.write` calls too, since the redactor's rolling buffer joins what arrives in
pieces — and is counted as it leaves it.

Starting Node.js costs about 40 ms, paid ahead: once a program has run in the session's kernel,
the next Node.js process is started at once and waits, its program not yet given, reading its stdin
(`prepare`); the next call of the same kind gives it its program instead of starting one (`start`).
It is still a fresh process per call: it has run nothing before its program. It is used only while
the working directory and environment it was started in are still the kernel's; otherwise it is
stopped and a new one started. Only the language last run keeps its waiting processes (one Node.js
for JavaScript, about 40 MB and 7 threads; for TypeScript also a transpiler with `typescript`
loaded, about 90 MB): they count against the session's memory and task limits, and end with it.

TypeScript is transpiled first (types removed, no type check: `typescript`'s `transpileModule`,
reporting syntax errors only) by a short Node.js step whose output is kept here, not relayed; a
syntax error is reported like Node reports one (`SyntaxError: <message> (TS<code>)` with its
line), and the program never runs. The `typescript` package is looked up at
`$SANDBOX_TYPESCRIPT` (the local interpreter binds its pinned copy there), then as Node resolves
`typescript`, then beside the Node.js installation (`<prefix>/lib/node_modules`). Node.js itself is
`$SANDBOX_NODE`, else the system's, else the first `node` on PATH.
"""

import base64
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
import types

JAVASCRIPT = "javascript"
TYPESCRIPT = "typescript"
LANGUAGES = (JAVASCRIPT, TYPESCRIPT)
ENV_NODE = "SANDBOX_NODE"
ENV_TYPESCRIPT = "SANDBOX_TYPESCRIPT"
SYNTAX_ERROR = 1  # the status of a TypeScript program that does not parse (as Node's own)
NOT_STARTED = 127  # Node.js or the TypeScript transpiler is not there (as a shell reports it)
TIMED_OUT = 124  # as the shell runtime's
CALL_START_MODULE = "_sbx_call"  # sandbox_common.naming.CALL_START_MODULE (this file imports nothing of ours)
_SYSTEM_NODES = ("/usr/bin/node", "/usr/local/bin/node")

# The transpile step: TypeScript on stdin, JavaScript (an ES module) on stdout; the first syntax
# error on stderr in Node's own shape (location, source line, caret, `SyntaxError: ...`, frame).
TRANSPILER = r"""
const path = require("path");
function load() {
  const found = [process.env.SANDBOX_TYPESCRIPT, "typescript",
    path.join(path.dirname(process.execPath), "..", "lib", "node_modules", "typescript")];
  for (const where of found) {
    if (!where) continue;
    try { return require(where); } catch (e) { /* the next place */ }
  }
  return null;
}
const ts = load();
if (ts === null) {
  process.stderr.write("TypeScript is not available in this session: no `typescript` package was found\n");
  process.exit(127);
}
const source = require("fs").readFileSync(0, "utf8");
const out = ts.transpileModule(source, {
  fileName: "code.ts",
  reportDiagnostics: true,
  compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, isolatedModules: true,
                     esModuleInterop: true, sourceMap: false },
});
const errors = (out.diagnostics || []).filter((d) => d.category === ts.DiagnosticCategory.Error);
if (errors.length) {
  const d = errors[0];
  const message = ts.flattenDiagnosticMessageText(d.messageText, " ");
  let line = 1, column = 0, text = "";
  if (d.file && d.start !== undefined) {
    const at = d.file.getLineAndCharacterOfPosition(d.start);
    line = at.line + 1; column = at.character; text = source.split(/\r?\n/)[at.line] || "";
  }
  process.stderr.write(`[stdin]:${line}\n${text}\n${" ".repeat(column)}^\n\n` +
    `SyntaxError: ${message} (TS${d.code})\n    at [stdin]:${line}:${column + 1}\n`);
  process.exit(1);
}
process.stdout.write(out.outputText);
"""


def find_node():
    """The Node.js to run: $SANDBOX_NODE, else the system's, else the first `node` on PATH."""
    configured = os.environ.get(ENV_NODE)
    if configured:
        return configured
    for candidate in _SYSTEM_NODES:
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("node") or "node"


def argv(language, node=None):
    """Node's command line for a program of `language` read from stdin."""
    node = node or find_node()
    if language == TYPESCRIPT:
        return [node, "--input-type=module", "-"]
    return [node, "-"]


def launch(command):
    """Start `command` (a Node.js reading its program from stdin) as the shell runtime's `launch`
    starts bash: its stdout / stderr on pipes, this process's working directory and environment,
    a process group of its own. Returns (proc, program_w, out_r, err_r): the caller writes the
    program into program_w and closes it. Raises OSError, every pipe closed, when Node.js could
    not be started."""
    program_r, program_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        proc = subprocess.Popen(
            command,
            stdin=program_r,
            stdout=out_w,
            stderr=err_w,
            start_new_session=True,
        )
    except OSError:
        for fd in (program_r, program_w, out_r, out_w, err_r, err_w):
            os.close(fd)
        raise
    for fd in (program_r, out_w, err_w):
        os.close(fd)
    return proc, program_w, out_r, err_r


# One Node.js started ahead per command line, waiting for its program: (proc, fds, context).
_SPARES: dict[tuple, tuple] = {}


def _context():
    """What a process started now inherits that a program may depend on: working directory and
    environment (None when the working directory is gone)."""
    try:
        return os.getcwd(), dict(os.environ)
    except OSError:
        return None


def prepare(command):
    """Start the next Node.js of `command` now, to wait for its program (`start` gives it one)."""
    key = tuple(command)
    if key in _SPARES:
        return
    context = _context()
    if context is None:
        return
    try:
        proc, *fds = launch(command)
    except OSError:
        return
    _SPARES[key] = (proc, fds, context)


def keep_only(commands):
    """Stop the waiting Node.js processes of every other command line (another language's)."""
    keep = {tuple(command) for command in commands}
    for key in [k for k in _SPARES if k not in keep]:
        proc, fds, _ = _SPARES.pop(key)
        _discard(proc, fds)


def start(command):
    """A Node.js of `command` for a program, as `launch` answers it: the one `prepare` started
    when it is still waiting and was started in the kernel's present working directory and
    environment, else a new one."""
    spare = _SPARES.pop(tuple(command), None)
    if spare is not None:
        proc, fds, context = spare
        if proc.poll() is None and context == _context():
            return (proc, *fds)
        _discard(proc, fds)
    return launch(command)


def _discard(proc, fds):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def transpiler(node=None):
    """The transpile step's command line."""
    return [node or find_node(), "-e", TRANSPILER]


def transpile(source, deadline_s, err, node=None, keep_spare=False):
    """TypeScript `source` (bytes) as JavaScript: (0, javascript) or (status, None) with the reason
    written to `err` (SYNTAX_ERROR, NOT_STARTED, TIMED_OUT when the step outlived `deadline_s`).
    The transpiler loads `typescript` before it reads its input, so one started ahead (`prepare`,
    with `keep_spare`) has it loaded already."""
    command = transpiler(node)
    try:
        proc, source_w, out_r, err_r = start(command)
    except OSError as exc:
        _write(err, f"node could not be started: {exc}\n")
        return NOT_STARTED, None
    try:
        outputs = _communicate(proc, source_w, (out_r, err_r), source, deadline_s)
    finally:
        if keep_spare:
            prepare(command)
    if outputs is None:
        return TIMED_OUT, None
    (javascript, diagnostics), code = outputs
    if code != 0:
        _write(err, diagnostics.decode("utf-8", errors="replace"))
        return (NOT_STARTED if code == NOT_STARTED else SYNTAX_ERROR), None
    return 0, javascript


def _communicate(proc, source_w, readers, data, deadline_s):
    """Feed `data` to `proc` and read its two output pipes to their end, all on one selector (a
    large output on one pipe never blocks the other); (outputs, status), or None (the process
    group killed) when `deadline_s` passed first. Every fd is closed."""
    deadline = None if deadline_s is None else time.monotonic() + deadline_s
    outputs = {fd: bytearray() for fd in readers}
    pending = memoryview(data)
    selector = selectors.DefaultSelector()
    os.set_blocking(source_w, False)
    for fd in readers:
        selector.register(fd, selectors.EVENT_READ)
    selector.register(source_w, selectors.EVENT_WRITE)
    timed_out = False
    try:
        while selector.get_map():
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                timed_out = True
                break
            for key, _ in selector.select(wait):
                if key.fd == source_w:
                    try:
                        pending = pending[os.write(source_w, pending) :]
                    except OSError:
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(source_w)
                        os.close(source_w)
                        source_w = -1
                    continue
                chunk = os.read(key.fd, 65536)
                if chunk:
                    outputs[key.fd] += chunk
                else:
                    selector.unregister(key.fd)
    finally:
        selector.close()
        for fd in (source_w, *readers):
            if fd >= 0:
                os.close(fd)
    if timed_out:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        return None
    return tuple(bytes(outputs[fd]) for fd in readers), proc.wait()


def run(shell, source, language, deadline_s=None, out=None, err=None, keep_spare=False):
    """Run `source` (bytes) of `language` to its end or its deadline with the shell runtime's
    `run` (`shell`: sandbox_session.shell as loaded by the caller); its output into `out` / `err`
    (default: sys.stdout / sys.stderr). Returns its exit status (128 + signal when killed),
    TIMED_OUT when stopped at the deadline, SYNTAX_ERROR for TypeScript that does not parse,
    NOT_STARTED when Node.js or the transpiler is not there. `keep_spare`: a process that runs
    more programs (the session's kernel) starts the next Node.js ahead (`prepare`)."""
    err = sys.stderr if err is None else err
    node = find_node()
    started = time.monotonic()
    command = argv(language, node)
    if keep_spare:  # this language's waiting processes only
        keep_only([command, transpiler(node)] if language == TYPESCRIPT else [command])
    if language == TYPESCRIPT:
        status, source = transpile(source, deadline_s, err, node, keep_spare)
        if source is None:
            _flush(err)
            return status
    remaining = None if deadline_s is None else max(0.0, deadline_s - (time.monotonic() - started))
    try:
        return shell.run(source, remaining, out, err, start=lambda: start(command), name="node")
    finally:
        if keep_spare:
            prepare(command)


def _write(stream, text):
    try:
        stream.write(text)
    except Exception:  # a stream the caller's code broke: the message is dropped, not raised
        pass


def _flush(stream):
    try:
        stream.flush()
    except Exception:
        pass


def _mark_call_start():
    """Record when this call started, on the session's clock: the artifact collector returns the
    files changed under outputs/ since then with this call, not with a background job."""
    module = sys.modules.get(CALL_START_MODULE)
    if module is None:
        module = types.ModuleType(CALL_START_MODULE)
        sys.modules[CALL_START_MODULE] = module
    module.started_ns = time.time_ns()


def main(shell, code_b64, language, deadline_s=None):
    """A program in the session's kernel: run it, end like a process with its status."""
    _mark_call_start()
    status = run(shell, base64.b64decode(code_b64), language, deadline_s, keep_spare=True)
    if status:
        raise SystemExit(status)
