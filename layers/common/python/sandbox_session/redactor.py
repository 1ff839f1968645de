"""The in-sandbox stdio redactor (layer 1 of docs/redaction.md) — the code that runs INSIDE the interpreter.

STDLIB ONLY and self-contained: `sandbox_common.redaction.stdio.preamble_source()` ships this
file's source, together with catalogue.py's source, into the Code Interpreter, which cannot import
our packages. It is also importable on the host so that tests exercise the very same code.

How the rolling buffer works (and why it stays cheap):
- The per-write cost is what users feel (`print` calls `write` once per argument and separator),
  so `write()` is one small Python function around a C `io.TextIOWrapper.write`: that wrapper
  batches the text in C and hands ~CHUNK_CHARS-sized UTF-8 batches to its buffer, whose `write`
  is the C `list.append` of a batch list. No regex, no Python-level accounting per write; a
  batch is redacted once it exists, on `flush()` and at exit. (The buffer's `write` being C
  matters: batches are queued in exactly the order the TextIOWrapper produced them, even when
  threads write concurrently — a Python `write` could be preempted before queuing.)
- On a drain, the text is split into an emit-now part and a held-back tail. The tail is what
  could still become part of a token: the trailing run of token characters (every class but
  bearer is made of them), widened to `Authorization: Bearer` header words in front of it (and
  to a run glued in front of those, and so on), and the longest suffix that is a prefix of a
  registered value. Everything before the tail is redacted and written. So a token split
  across writes at any offset — also when a fragment ends a line — is only ever written once
  complete, hence redacted; and the output equals the catalogue's redaction of the joined text
  (tests pin that).
- The tail is capped at the catalogue's `HOLD_CHARS`. Tokens have no maximum length, so a
  held run longer than that is either released (no match runs to its end) or, when a match
  runs to its end (a token of several KiB still being written), redacted at once; the stream
  then drops what follows for as long as it continues that match's run (the class's `run`
  alphabet), exactly what redacting the joined text would hide. The same happens on `flush()`
  when the flushed text ends inside a match. Memory stays bounded, output equals the joined
  text's redaction.
- ASCII batches (the common case) stay bytes: hold-back and the catalogue's C-speed prefilter
  (`candidate_classes_utf8`) run on them, and clean text goes straight to the real stream's
  binary buffer — no decode, no regex, no re-encode. Other batches, and every stream with
  registered values, take the general str path.
- `flush()` emits everything (redacted): callers that flush between fragments of a token get
  what they asked for; the host-side layer 2 still redacts the joined output.
- Non-str arguments never crash: the C write rejects them with TypeError, the slow path turns
  bytes into text (invalid UTF-8 replaced) and anything else into `str(x)`.
- `.buffer` (binary) writes pass through unchanged; touching `.buffer` first drains the text
  buffer so ordering is kept.
"""

import atexit
import codecs
import io
import os
import re
import sys
import threading

# Size of a batch (UTF-8 bytes) before it is redacted and written: large enough that the
# per-batch work is negligible per print, small enough to bound memory. Tests lower it with
# `set_chunk_chars` to drain after every write.
CHUNK_CHARS = 32768
SLICE_BYTES = 32768  # the general path's unit of work (see `_feed_slices`)
_STRIP_PROBE = 256  # see `_run_start`
_STATE = {"installed": False, "streams": ()}


class _BatchSink:
    """The binary buffer under the batching TextIOWrapper: collects its batches, in order."""

    closed = False  # a plain attribute: TextIOWrapper reads it on every write

    def __init__(self, batches):
        self.write = batches.append  # C: no Python frame, no preemption point

    def readable(self):
        return False

    def writable(self):
        return True

    def seekable(self):
        return False

    def flush(self):
        pass

    def close(self):
        pass


class RedactingStream:
    """A text stream wrapper that redacts with a rolling buffer. Delegates everything else."""

    _sbx_redacting = True

    def __init__(self, out, catalogue, redactor):
        self._out = out
        self._cat = catalogue
        self._redactor = redactor
        self._pending = b""  # the held-back tail, UTF-8 (surrogatepass)
        self._lock = threading.RLock()
        self._hold_max = catalogue.HOLD_CHARS
        # While a match is open (see `_skip_open`): the bytes regex of its continuation.
        self._open = None
        self._continuations = {
            c.name: re.compile(catalogue.continuation_pattern(c.name).encode("ascii"))
            for c in catalogue.TOKEN_CLASSES
        }
        self._token_chars = catalogue.TOKEN_CHARS
        self._token_bytes = catalogue.TOKEN_CHARS.encode("ascii")
        self._bearer_window = catalogue.BEARER_PREFIX_MAX
        self._bearer_tail = catalogue.BEARER_TAIL
        # The same pattern on bytes: used on ASCII text only, where `(?i:)` means the same.
        self._bearer_tail_bytes = re.compile(catalogue.BEARER_TAIL.pattern.encode("ascii"))
        self._raw, self._encoding, self._errors = _binary_target(out)
        batches = []
        self._batches = batches
        # surrogatepass both ways: lone surrogates survive to `_write_text`, which decides what
        # the real stream can take.
        self._text = io.TextIOWrapper(_BatchSink(batches), encoding="utf-8", errors="surrogatepass")
        self._text._CHUNK_SIZE = CHUNK_CHARS
        self.write = self._make_write(self._text.write, batches, self._drain)

    # -- the hot path ---------------------------------------------------------------------------
    @staticmethod
    def _make_write(text_write, batches, drain):
        # A closure (an instance attribute) rather than a method: no `self` attribute lookups on
        # the hot path.
        def write(s):
            try:
                n = text_write(s)
            except TypeError:
                n = text_write(_coerce(s))
            if batches:
                drain(False)
            return n

        return write

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        self._text.flush()
        self._drain(True)
        try:
            self._out.flush()
        except Exception:
            pass

    # -- draining ---------------------------------------------------------------------------
    def _drain(self, final):
        with self._lock:
            batches = self._batches
            n = len(batches)
            if n == 0 and not (final and self._pending):
                return
            # Slicing and `del` are single operations under the GIL: a batch queued while this
            # drain runs lands after index n and is kept for the next drain.
            data = b"".join(batches[:n])
            del batches[:n]
            if self._open is not None:
                data = self._skip_open(data, final)
                if not data:
                    return
            if (
                self._raw is not None
                and not self._redactor.has_values
                and data.isascii()
                and self._pending.isascii()
                and self._feed_ascii(data, final)
            ):
                return
            self._feed_slices(data, final)

    def _feed_ascii(self, data, final):
        """The fast path: ASCII output (the common case) never becomes a str again.

        The hold-back and the catalogue prefilter run on the bytes; clean text goes to the
        stream's binary buffer as is. Returns False (nothing consumed) when the general path
        must decide: a held-back tail longer than any token.
        """
        pending = self._pending
        text = pending + data if pending else data
        size = len(text)
        if final:
            cut = size
        else:
            cut = self._hold_start_ascii(text)
            if cut < 0:
                return False
        if cut:
            if self._cat.candidate_classes_utf8(text, cut):
                self._write_head(text[:cut].decode("ascii"), final)
            else:
                self._raw.write(memoryview(text)[:cut] if cut < size else text)
        self._pending = text[cut:] if cut < size else b""
        return True

    def _hold_start_ascii(self, text):
        """`_hold_start` on ASCII bytes (no registered values), or -1 past the hold limit."""
        length = len(text)
        cut = hold_chain(
            text, length, self._token_bytes, self._bearer_tail_bytes, self._bearer_window, self._hold_max
        )
        return cut if length - cut <= self._hold_max else -1

    def _feed_slices(self, data, final):
        """The general path (any text, registered values): redact str slices of the batch."""
        size = len(data)
        start = 0
        # Slices of at most SLICE_BYTES: a large write (say 64 KiB) otherwise makes several
        # same-sized temporaries live at once; freeing them hands the heap top back to the OS
        # and every next write page-faults it in again (measured: 64 faults and 4x the time per
        # 64 KiB write).
        while True:
            end = start + SLICE_BYTES
            if end >= size:
                end = size
            else:
                # Never split a UTF-8 sequence: back up over continuation bytes.
                while (data[end] & 0xC0) == 0x80 and end > start + 1:
                    end -= 1
            piece = data[start:end] if start or end < size else data
            if self._open is not None:
                piece = self._skip_open(piece, final and end == size)
            if piece or (final and end == size):
                self._feed_text(piece, final and end == size)
            if end == size:
                return
            start = end

    def _feed_text(self, data, final):
        raw = self._pending + data if self._pending else data
        # Batches hold whole encoded writes and slices end on sequence boundaries; "replace" is
        # only a guard against the impossible.
        try:
            text = raw.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            text = raw.decode("utf-8", "replace")
        if final:
            head, tail = text, ""
        else:
            cut = self._hold_start(text)
            if cut < 0:  # a match runs to the end of a tail longer than HOLD_CHARS
                head, tail, final = text, "", True
            else:
                head, tail = text[:cut], text[cut:]
        self._pending = tail.encode("utf-8", "surrogatepass")
        if head:
            self._write_head(head, final)

    def _write_head(self, head, final):
        """Redact and write `head`; when it ends the text seen so far (`final`) inside a match,
        open that match so its continuation is dropped."""
        if not final:
            self._write_text(self._redactor.redact(head))
            return
        redacted, open_class = self._redactor.redact_open(head)
        self._write_text(redacted)
        if open_class is not None:
            self._open = self._continuations[open_class]

    def _skip_open(self, data, final):
        """Drop the start of `data` that continues the open match; close it where its run ends."""
        end = self._open.match(data).end()
        if end < len(data) or final:
            self._open = None
        return data[end:] if end else data

    def _hold_start(self, text):
        length = len(text)
        cut = hold_chain(
            text, length, self._token_chars, self._bearer_tail, self._bearer_window, self._hold_max
        )
        if self._redactor.has_values:
            cut = self._redactor.value_hold_start(text, cut)
        if length - cut > self._hold_max:
            # Longer than the hold limit: release the oldest part, but never split a match. A
            # match running to the end of the text is still growing: -1 tells the caller to
            # redact everything now and drop that match's continuation.
            # (The whole text is searched: a drain adds up to CHUNK_CHARS, so a match straddling
            # the cut may start anywhere in it. This path runs only for runs this long.)
            cut = length - self._hold_max
            for m in self._redactor.finditer(text, 0):
                if m.start() < cut < m.end():
                    if m.end() == length and m.lastgroup is not None:
                        return -1
                    cut = m.end()
                    break
                if m.start() >= cut:
                    break
        return cut

    def _write_text(self, text):
        raw = self._raw
        if raw is None:
            self._emit(text)
            return
        try:
            data = text.encode(self._encoding, self._errors)
        except UnicodeEncodeError:
            # Lone surrogates or characters the stream's encoding lacks: never crash user code.
            data = text.encode(self._encoding, "backslashreplace")
        raw.write(data)

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

    def redirected(self, out):
        """A stream into `out` that redacts exactly as this one does (its catalogue and values)."""
        return type(self)(out, self._cat, self._redactor)

    def __getattr__(self, name):
        return getattr(self._out, name)

    def _after_fork(self):
        self._lock = threading.RLock()

    def _set_chunk_chars(self, n):
        self._text.flush()
        self._text._CHUNK_SIZE = n


def hold_chain(text, end, chars, bearer_tail, bearer_window, hold_max):
    """Where the held-back tail of text[:end] starts (str or bytes alike).

    The tail is what could still become part of a token once more text arrives: the trailing run
    of token characters; if `Authorization: Bearer` header words end right before it, those
    too; and if the header words are glued to a run before them ("...UvWxAuthorization:"), that
    run as well — and so on. Holding the whole chain means the joined text is matched exactly as
    the host would match it. Stops once the tail is longer than any token.
    """
    cut = _run_start(text, end, chars)
    while end - cut <= hold_max:
        lo = cut - bearer_window
        m = bearer_tail.search(text, lo if lo > 0 else 0, cut)
        if m is None:
            break
        start = _run_start(text, m.start(), chars)
        if start >= cut:
            break
        cut = start
    return cut


def _run_start(text, end, chars):
    """Start of the run of `chars` that ends at `end` (str or bytes alike).

    `rstrip` copies what it keeps, so strip a short window first and everything before `end`
    only when that window is all run characters.
    """
    lo = end - _STRIP_PROBE
    window = text[lo if lo > 0 else 0 : end]
    kept = len(window.rstrip(chars))
    if kept or lo <= 0:
        return end - len(window) + kept
    return len(text[:end].rstrip(chars))


def _binary_target(out):
    """(binary buffer, encoding, errors) to write redacted bytes to, or (None, None, None).

    Writing the bytes we already hold straight to the stream's buffer saves a decode and an
    encode per batch. Only for a UTF-8 stream with a writable buffer (what the interpreter's
    stdout/stderr are); anything else gets text through its `write`. The stream is flushed
    first so text written before the wrapper was installed keeps its place.
    """
    try:
        encoding = codecs.lookup(out.encoding).name
        raw = out.buffer
        if encoding != "utf-8" or not raw.writable():
            return None, None, None
        out.flush()
        return raw, encoding, getattr(out, "errors", None) or "strict"
    except Exception:
        return None, None, None


def _coerce(s):
    if isinstance(s, (bytes, bytearray, memoryview)):
        return bytes(s).decode("utf-8", "replace")
    return str(s)


def set_chunk_chars(n):
    """Batch size of every installed stream from now on (tests: 1 drains after every write)."""
    global CHUNK_CHARS
    CHUNK_CHARS = n
    for stream in _STATE["streams"]:
        stream._set_chunk_chars(n)


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
