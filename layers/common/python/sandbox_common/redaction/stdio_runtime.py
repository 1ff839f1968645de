"""The in-sandbox stdio redactor (SPEC §8 layer 1) — the code that runs INSIDE the interpreter.

STDLIB ONLY and self-contained: `stdio.preamble_source()` ships this file's source, together with
catalogue.py's source, into the Code Interpreter, which cannot import our packages. It is also
importable on the host so that tests exercise the very same code.

How the rolling buffer works (and why it stays cheap):
- `write()` only appends to a list; work happens once ≥ CHUNK_CHARS have accumulated, on
  `flush()` and at exit. Short prints cost one list append.
- On a drain, the text is split into an emit-now part and a held-back tail. The tail is what
  could still be the beginning of a token: the trailing run of token characters (every class but
  bearer is made of them), widened to the `Authorization: Bearer` header words in front of it,
  and the longest suffix that is a prefix of a registered value. Everything before the tail is
  redacted and written. So a token split across writes at any offset — also when a fragment
  ends a line — is only ever written once complete, hence redacted.
- The tail is capped at the catalogue's `max_token_length()`; text longer than that cannot be
  one token.
- `flush()` emits everything (redacted): callers that flush between fragments of a token get
  what they asked for; the host-side layer 2 still redacts the joined output.
- `.buffer` (binary) writes pass through unchanged; touching `.buffer` first drains the text
  buffer so ordering is kept.
"""

import atexit
import os
import sys
import threading

CHUNK_CHARS = 8192
_STATE = {"installed": False, "streams": ()}


class RedactingStream:
    """A text stream wrapper that redacts with a rolling buffer. Delegates everything else."""

    _sbx_redacting = True

    def __init__(self, out, catalogue, redactor):
        self._out = out
        self._cat = catalogue
        self._redactor = redactor
        self._parts = []
        self._size = 0
        self._pending = ""
        self._lock = threading.RLock()
        self._hold_max = catalogue.max_token_length()
        self._token_chars = catalogue.TOKEN_CHARS
        self._bearer_window = catalogue.BEARER_PREFIX_MAX
        self._bearer_tail = catalogue.BEARER_TAIL

    # -- the hot path ---------------------------------------------------------------------------
    def write(self, s):
        if type(s) is not str:
            s = _coerce(s)
        self._parts.append(s)
        self._size += len(s)
        if self._size >= CHUNK_CHARS:
            self._drain(False)
        return len(s)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        self._drain(True)
        try:
            self._out.flush()
        except Exception:
            pass

    # -- draining ---------------------------------------------------------------------------
    def _drain(self, final):
        with self._lock:
            parts = self._parts
            n = len(parts)
            if n == 0 and not (final and self._pending):
                return
            # Slicing and `del` are single operations under the GIL: a write racing with this
            # drain lands after index n and is kept for the next drain.
            text = self._pending + "".join(parts[:n])
            del parts[:n]
            self._size = 0
            if final:
                head, self._pending = text, ""
            else:
                cut = self._hold_start(text)
                head, self._pending = text[:cut], text[cut:]
            if head:
                self._emit(self._redactor.redact(head))

    def _hold_start(self, text):
        length = len(text)
        cut = len(text.rstrip(self._token_chars))
        lo = cut - self._bearer_window
        m = self._bearer_tail.search(text, lo if lo > 0 else 0, cut)
        if m is not None:
            cut = m.start()
        if self._redactor.has_values:
            cut = self._redactor.value_hold_start(text, cut)
        if length - cut > self._hold_max:
            # Longer than any token: release the oldest part, but never split a match.
            cut = length - self._hold_max
            lo = cut - self._hold_max
            window_start = lo if lo > 0 else 0
            for m in self._redactor.finditer(text, window_start):
                if m.start() < cut < m.end():
                    cut = m.start()
                    break
                if m.start() >= cut:
                    break
        return cut

    def _emit(self, text):
        try:
            self._out.write(text)
        except UnicodeEncodeError:
            # Lone surrogates or characters the stream's encoding lacks: never crash user code.
            enc = getattr(self._out, "encoding", None) or "utf-8"
            self._out.write(text.encode(enc, "backslashreplace").decode(enc, "replace"))

    # -- the rest of the stream API --------------------------------------------------------------
    @property
    def buffer(self):
        self.flush()
        return self._out.buffer

    def close(self):
        self.flush()

    @property
    def closed(self):
        return getattr(self._out, "closed", False)

    def isatty(self):
        return self._out.isatty()

    def fileno(self):
        return self._out.fileno()

    def writable(self):
        return True

    def readable(self):
        return False

    def seekable(self):
        return False

    def __getattr__(self, name):
        return getattr(self._out, name)

    def _after_fork(self):
        self._lock = threading.RLock()


def _coerce(s):
    if isinstance(s, (bytes, bytearray, memoryview)):
        return bytes(s).decode("utf-8", "replace")
    return str(s)


def installed():
    """True only if both stdout and stderr are live redacting wrappers that redact a token."""
    try:
        if not _STATE["installed"]:
            return False
        streams = _STATE["streams"]
        if sys.stdout is not streams[0] or sys.stderr is not streams[1]:
            return False
        cat = streams[0]._cat
        probe = cat.TOKEN_CLASSES[0].examples[0]
        return all(s._redactor.redact(probe) != probe for s in streams)
    except Exception:
        return False


def install(catalogue, values=()):
    """Wrap sys.stdout/sys.stderr. Idempotent: an already wrapped stream is not wrapped again,
    it only gets the new redactor (e.g. more registered values)."""
    redactor = catalogue.Redactor(values)
    streams = []
    for name in ("stdout", "stderr"):
        current = getattr(sys, name)
        if getattr(current, "_sbx_redacting", False):
            current.flush()
            current._redactor = redactor
            streams.append(current)
            continue
        wrapper = RedactingStream(current, catalogue, redactor)
        setattr(sys, name, wrapper)
        streams.append(wrapper)
    first = not _STATE["installed"]
    _STATE["streams"] = tuple(streams)
    _STATE["installed"] = True
    if first:
        atexit.register(_flush_all)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork)
    return installed()


def _flush_all():
    for stream in _STATE["streams"]:
        try:
            stream.flush()
        except Exception:
            pass


def _after_fork():
    for stream in _STATE["streams"]:
        stream._after_fork()
