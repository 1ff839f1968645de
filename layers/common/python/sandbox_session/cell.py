"""Python code INSIDE the session under an inner deadline (a timeout keeps the output written
before it).

STDLIB ONLY and self-contained, like the rest of `sandbox_session`: the session runner ships this
file's source with each Python call (`sandbox_runtime.runner.cells`); the driver keeps the module
in `sys.modules` while its source is unchanged, so a session compiles it once.

The code runs in the session's main thread, in the session's globals, compiled as a cell of its
own (own file name, own AST, a trailing expression displayed through `sys.displayhook`), like the
interpreter runs a cell. Before it starts, a timer (`signal.setitimer`, SIGALRM) is armed for the
inner deadline the runner chose a little before its own. When it fires, `DeadlinePassed` (a
BaseException, like KeyboardInterrupt: `except Exception` does not catch it) is raised wherever the
code is — a `time.sleep` or a blocking read is interrupted too — and again every REPEAT_SECONDS
while the code swallows it. The code is stopped, what it printed stays in `sys.stdout` /
`sys.stderr` (so it passes the in-session redactor and is counted like any output), and the cell
ends as `SystemExit(TIMED_OUT)`, the status the runner reads, arriving no earlier than the inner
deadline, as the call's timeout. The session and its variables carry on, as after an interrupt in
a notebook: what the code assigned before the deadline is kept.

What the timer cannot stop — code that blocks SIGALRM, replaces its handler, or sits in C code
that never returns to the interpreter — runs on until the runner's own deadline, which stops the
session (docs/tool-surface.md).

`run` returns the exception the code raised (its traceback starting at the code's own first
frame), or None; the driver raises it, so the interpreter reports it as for any cell (exit code,
traceback on stderr, MemoryError, SystemExit and its code).
"""

import ast
import base64
import linecache
import signal
import sys
import time
import types

TIMED_OUT = 124  # the status of code stopped at its deadline (as coreutils' `timeout` reports it)
REPEAT_SECONDS = 0.5  # while the code swallows DeadlinePassed, it is raised again this often
CELL_PREFIX = "<code-"
CALL_START_MODULE = "_sbx_call"  # sandbox_common.naming.CALL_START_MODULE (this file imports nothing of ours)

_STATE = {"armed": False, "fired": False, "ours": False, "previous": None, "cell": 0}


class DeadlinePassed(BaseException):
    """Raised in the code when its deadline passed."""


def _on_alarm(signum, frame):
    if not _STATE["armed"]:
        return
    _STATE["fired"] = True
    if frame is not None and frame.f_code.co_filename == _OWN:
        return  # this runtime's own frames are never interrupted: `run` sees `fired` when it ends
    raise DeadlinePassed()


def _arm(deadline_s):
    """Arm the timer, unless none can be armed here (not the main thread, no SIGALRM): the
    runner's deadline is then the only one."""
    if deadline_s is None or not hasattr(signal, "setitimer"):
        return
    try:
        _STATE["previous"] = signal.signal(signal.SIGALRM, _on_alarm)
    except (ValueError, OSError):  # not the main thread
        return
    _STATE["ours"] = True
    _STATE["armed"], _STATE["fired"] = True, False
    signal.setitimer(signal.ITIMER_REAL, max(0.001, float(deadline_s)), REPEAT_SECONDS)


def _disarm():
    """Stop the timer and put the previous handler back — unless the code installed a SIGALRM
    handler of its own, which then keeps its handler and its timer."""
    _STATE["armed"] = False
    ours, previous = _STATE["ours"], _STATE["previous"]
    _STATE["ours"], _STATE["previous"] = False, None
    if not ours or signal.getsignal(signal.SIGALRM) is not _on_alarm:
        return
    signal.setitimer(signal.ITIMER_REAL, 0)
    # signal.signal runs a pending handler first: ours, disarmed, which does nothing. A handler
    # that was not installed from Python (None) cannot be put back: the default takes its place.
    signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)


def _user_traceback(tb):
    """Drop every frame before the code's first (this runtime's, and the stdlib's: a SyntaxError is
    raised inside ast.parse, whose frame names a host path): the traceback starts where the code
    does. A SyntaxError keeps no frame at all; Python prints its file and line from the exception."""
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith(CELL_PREFIX):
        tb = tb.tb_next
    return tb


def _body(code, filename, namespace):
    tree = ast.parse(code, filename=filename, mode="exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(body=tree.body.pop().value)
    exec(compile(tree, filename, "exec", dont_inherit=True), namespace)
    if last is not None:
        value = eval(compile(last, filename, "eval", dont_inherit=True), namespace)
        sys.displayhook(value)  # a notebook cell's echo: through sys.stdout, counted like print


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a stream the code broke: the interpreter reports what it can
            pass


def _mark_call_start():
    """Record when this call started, on the session's clock: the artifact collector returns the
    files changed under outputs/ since then with this call, not with a background job."""
    module = sys.modules.get(CALL_START_MODULE)
    if module is None:
        module = types.ModuleType(CALL_START_MODULE)
        sys.modules[CALL_START_MODULE] = module
    module.started_ns = time.time_ns()


_OWN = _flush.__code__.co_filename  # the file name this runtime was compiled under


def run(code_b64, deadline_s, namespace):
    """Run the code (base64 of its UTF-8 bytes) in `namespace`, stopped at `deadline_s` seconds.
    Returns what the driver raises: None, the code's exception, or SystemExit(TIMED_OUT)."""
    _mark_call_start()
    code = base64.b64decode(code_b64).decode("utf-8")
    _STATE["cell"] += 1
    filename = f"{CELL_PREFIX}{_STATE['cell']}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    raised = None
    try:
        try:
            _arm(deadline_s)
            _body(code, filename, namespace)
        finally:
            _disarm()
    except DeadlinePassed:
        pass
    except BaseException as exc:  # reported by the interpreter, as for any cell
        raised = exc.with_traceback(_user_traceback(exc.__traceback__))
    if _STATE["fired"]:  # the deadline passed, however the code ended after it
        _STATE["fired"] = False
        _flush()
        return SystemExit(TIMED_OUT)
    return raised
