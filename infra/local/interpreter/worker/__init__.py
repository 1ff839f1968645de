"""One Code Interpreter session: a persistent Python process that runs code and commands on request.

This package runs *inside* the sandbox (bubblewrap), bound read-only as a directory and started as
`python -I <directory>` (`__main__.py`), so it is stdlib-only and imports nothing from the project
but its own modules: `frames` (the protocol both sides must agree on; the server imports it),
`capture` (a call's output, at the file-descriptor level), `commands` (bash scripts, in the
foreground and as background tasks), `files` (the file tools) and `kernel` (the session's
interpreter and its request loop). Commands start bash with the session runtime's own launch
(`sandbox_session.shell.launch`), which the worker loads from that module's source file (`--shell`,
bound read-only into the sandbox beside this package).

Protocol: requests and answers are frames on two dedicated pipe fds, never on stdout/stderr, so
nothing user code prints can corrupt the channel: [u32 big-endian JSON length][u32 raw length]
[ASCII JSON][raw part], the raw part a sequence of blocks, each [u32 length][bytes]. The first
frame the worker sends is `{"ready": true, "pid": ...}`. Each request carries the server's
sequence number `seq` and its answer carries it back, so an answer is only ever taken for the call
that asked: a frame left in the channel (written there by user code) is off by at least one. An
answer's JSON holds scalars and short messages only (at most MAX_JSON); its raw blocks hold what
may be large:
- executeCode, executeCommand and the task tools: two blocks, the kept stdout and stderr bytes
  (at most --stdout-kept / --stderr-kept: the caps plus a redaction margin), the exact counts in
  the JSON;
- readFiles / listFiles: one block per file or entry, each a content block already encoded as
  JSON, which the server sends as its own event without parsing it (a 20 MiB readFiles answer is
  JSON-encoded once, here, and decoded once, by the client).
The worker shares its process with user code, which can write to these fds too: the server reads
every length against its bound before it reads what follows, and a frame outside the bounds ends
the session (sessions.py). The raw part is as trustworthy as every other answer of the session.

Semantics copied from AgentCore (a Jupyter-like kernel):
- one globals dict for the whole session: variables and imports survive between calls;
- a trailing expression is displayed (`sys.displayhook`, through `sys.stdout`), as a notebook cell
  does, and counted like any other output;
- an uncaught exception gives exit code 1 and the traceback (user frames only) on stderr;
  `sys.exit(n)` gives n; the session survives both;
- `MemoryError` reaching the top level is an uncaught exception like any other (exit code 1, its
  traceback on stderr, classified `oom` from it): Python caught it, so the session and its
  variables survive. A process the kernel's OOM killer (or anything else) kills ends the session.

Output is captured at the file-descriptor level (fd 1 / fd 2 point at per-call pipes), so output
of subprocesses and C extensions is captured too, and `sys.stdout` / `sys.stderr` stay the *same
objects* across calls: the readiness preamble (docs/redaction.md) wraps them once and the wrapper must
still be in place for every later call. The byte counts are of what reaches fd 1 / fd 2, i.e. of
what left the in-session redactor.

Commands (the wire contract a session runner uses for a shell script, docs/tool-surface.md):
`InvokeCodeInterpreter(name="executeCommand", arguments={"command": <script, byte-exact>})`. The
script runs to its end with the system's bash (`bash /dev/fd/N`: the script travels on a pipe, so
it is never an argument, limited to 128 KiB, nor stdin, which is /dev/null) as a child of this
process, in its current directory and with its environment: the same working directory, files,
PATH (the session's Python layer first: `python`, `python3`, `pip` are the ones code runs on) and
isolation as code. Its stdout / stderr are relayed through this process's `sys.stdout` /
`sys.stderr`, so through the in-session redactor exactly as Python output is, and counted as they
leave it. The answer is executeCode's: stdout, stderr, exitCode (bash's status, 128 + signal when
killed), isError iff exitCode != 0, the exact byte counts. `startCommandExecution` runs the same
way in the background (its own process group): the answer carries taskId and taskStatus
`working`; `getTask` answers the output so far (redacted by a copy of the session's redactor,
pushed out as it is written, never splitting a token), then `completed` / `failed` with exitCode;
`stopTask` kills the task and everything it started (`canceled`). What an executeCommand's
script leaves running ends with its call, as for a command dispatch sends
(`sandbox_session.shell.end_leftovers`).
"""
