"""The in-sandbox stdio redactor, run exactly as the sandbox runs it: the generated preamble
executed by a fresh `python -c` subprocess (no access to our packages)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sandbox_common.redaction import TOKEN_CLASSES
from sandbox_common.redaction.stdio import READINESS_MARKER, check_readiness, preamble_source

TOKENS = {c.name: c.examples[0] for c in TOKEN_CLASSES}
# The secret part of the bearer example (its header words stay visible by design).
SECRETS = {**TOKENS, "bearer": TOKENS["bearer"].split("Bearer ", 1)[1]}


def run_sandboxed(user_code: str, *, values=()) -> subprocess.CompletedProcess:
    """Preamble then user code in one fresh interpreter, isolated from our site-packages."""
    script = preamble_source(values) + "\n" + user_code
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", script], capture_output=True, timeout=120, check=False
    )


SPLIT_SCRIPT = r"""
import sys
rt = sys.modules["_sbx_stdio_runtime"]
rt.set_chunk_chars({chunk})
token = {token!r}
n = len(token)
count = 0
for pre, post in (("line one\n", "\nnext"), ("x=", " y\n"), ("", "")):
    for i in range(1, n):
        sys.stdout.write(pre + token[:i]); sys.stdout.write(token[i:] + post + "\n#\n")
        count += 1
        if {three}:
            for j in range(i + 1, n):
                sys.stdout.write(pre + token[:i]); sys.stdout.write(token[i:j])
                sys.stdout.write(token[j:] + post + "\n#\n")
                count += 1
sys.stderr.write("COUNT=%d\n" % count)
"""


@pytest.mark.parametrize("three", [False, True], ids=["two-writes", "three-writes"])
@pytest.mark.parametrize("chunk", [1, 8192], ids=["drain-every-write", "default-chunk"])
@pytest.mark.parametrize("token_class", list(TOKENS))
def test_stdio_token_split_at_every_offset_never_emitted(token_class, chunk, three):
    # Given a token of the class split across two or three writes at every offset
    token = TOKENS[token_class]
    code = SPLIT_SCRIPT.format(token=token, chunk=chunk, three=three)
    # When run in a fresh interpreter behind the preamble
    proc = run_sandboxed(code)
    # Then no fragment ever reassembles into the secret, and every occurrence was redacted
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    count = int(proc.stderr.decode().split("COUNT=")[1])
    assert SECRETS[token_class] not in out
    assert out.count("<redacted>") == count


def test_stdio_preamble_prints_one_readiness_line_installed_true():
    # Given / When
    proc = run_sandboxed("print('hello')")
    # Then
    lines = proc.stdout.decode().splitlines()
    assert lines == [READINESS_MARKER + json.dumps({"redactor_installed": True}), "hello"]
    assert check_readiness(proc.stdout.decode())


def test_stdio_binary_buffer_writes_pass_through_unchanged():
    # Given raw bytes, including invalid UTF-8, written to the binary buffer between text writes
    code = "import sys\nprint('a')\nsys.stdout.buffer.write(b'\\xff\\x00\\xfe raw\\n')\nprint('b')"
    # When
    proc = run_sandboxed(code)
    # Then bytes are unchanged and ordering is kept
    assert proc.stdout.split(b"\n", 1)[1] == b"a\n\xff\x00\xfe raw\nb\n"


def test_stdio_bytes_and_surrogates_never_crash():
    # Given bytes passed to the text stream and a lone surrogate
    code = (
        "import sys\n"
        "sys.stdout.write(b'bytes AKIAIOSFODNN7EXAMPLE \\xff\\n')\n"
        "print('\\udcff lone surrogate')\n"
        "sys.stderr.write(bytearray(b'err\\n'))\n"
    )
    # When
    proc = run_sandboxed(code)
    # Then it ran to the end, and the token in the bytes was still redacted
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode("utf-8", "replace")
    assert "bytes <redacted>" in out and "AKIA" not in out and "lone surrogate" in out
    assert proc.stderr == b"err\n"


def test_stdio_flushes_at_exit_and_on_flush():
    # Given output that is never explicitly flushed, then an explicit flush mid-way
    code = "import sys\nsys.stdout.write('partial ')\nsys.stdout.flush()\nsys.stdout.write('tail-no-newline')"
    # When
    proc = run_sandboxed(code)
    # Then nothing held back is lost at exit
    assert proc.stdout.decode().endswith("partial tail-no-newline")


def test_stdio_stderr_is_redacted_too():
    # Given / When
    proc = run_sandboxed(f"import sys\nsys.stderr.write('x {TOKENS['slack']} y\\n')")
    # Then
    assert proc.stderr == b"x <redacted> y\n"


def test_stdio_preamble_twice_is_idempotent():
    # Given the preamble run a second time in the same interpreter
    code = (
        preamble_source()
        + "\nimport sys\nprint(type(sys.stdout._out).__name__, type(sys.stderr._out).__name__)\n"
        f"print({TOKENS['github']!r})"
    )
    # When
    proc = run_sandboxed(code)
    # Then still one wrapper layer per stream, still installed, still redacting
    lines = proc.stdout.decode().splitlines()
    assert [check_readiness(line) for line in lines[:2]] == [True, True]
    assert lines[2] == "TextIOWrapper TextIOWrapper"
    assert lines[3] == "<redacted>"


def test_stdio_registered_value_split_across_writes():
    # Given a registered value with spaces, split in the middle of a word and between words
    value = "correct horse battery staple"
    code = (
        f"import sys\nv={value!r}\nfor i in range(1, len(v)):\n    sys.stdout.write(v[:i]);"
        " sys.stdout.write(v[i:] + '\\n')\n"
    )
    # When
    proc = run_sandboxed(code, values=[value])
    # Then
    out = proc.stdout.decode()
    assert value not in out and out.count("<redacted>") == len(value) - 1


def test_stdio_installed_false_when_a_stream_was_replaced():
    # Given user code that swapped stderr back to the raw stream
    code = (
        f"import sys, json\nsys.stderr = sys.__stderr__\nprint({READINESS_MARKER!r} +"
        " json.dumps({'redactor_installed': sys.modules['_sbx_stdio_runtime'].installed()}))"
    )
    # When
    proc = run_sandboxed(code)
    # Then installed() reports it and the readiness check fails on that line
    last = proc.stdout.decode().splitlines()[-1]
    assert last == READINESS_MARKER + '{"redactor_installed": false}'
    assert not check_readiness(proc.stdout.decode())


@pytest.mark.parametrize(
    ("stdout", "ready"),
    [
        (READINESS_MARKER + '{"redactor_installed": true}\n', True),
        ("noise\n" + READINESS_MARKER + '{"redactor_installed": true}', True),
        (READINESS_MARKER + '{"redactor_installed": false}\n', False),
        (READINESS_MARKER + '{"redactor_installed": "true"}\n', False),
        (READINESS_MARKER + "not json\n", False),
        ("", False),
        ('{"redactor_installed": true}\n', False),
        (
            READINESS_MARKER
            + '{"redactor_installed": true}\n'
            + READINESS_MARKER
            + '{"redactor_installed": false}',
            False,
        ),
    ],
)
def test_check_readiness_only_true_for_an_installed_marker(stdout, ready):
    # Given / When / Then
    assert check_readiness(stdout) is ready


def test_preamble_embeds_the_catalogue_source_verbatim():
    # Given the catalogue module file
    from pathlib import Path

    from sandbox_common.redaction import catalogue

    source = Path(catalogue.__file__).read_text(encoding="utf-8")
    # When / Then the preamble ships that exact source (one source of truth)
    assert repr(source) in preamble_source()


STREAM_SCRIPT = r"""
import json, random, sys
rt = sys.modules["_sbx_stdio_runtime"]
cases = json.loads(sys.stdin.buffer.read())
rng = random.Random({seed})
for text, chunk in cases:
    rt.set_chunk_chars(chunk)
    i = 0
    while i < len(text):
        j = min(len(text), i + rng.choice((1, 2, 3, 5, 8, 13, 40, 300, 5000)))
        piece = text[i:j]
        if rng.random() < 0.05:
            sys.stdout.write(piece.encode("utf-8"))  # bytes take the slow path of write()
        elif rng.random() < 0.3:
            print(piece, end="")
        else:
            sys.stdout.write(piece)
        i = j
    sys.stdout.flush()
    sys.stdout.write("\x00CASE\x00")
    sys.stdout.flush()
"""


def _stream_cases(seed: int, n: int) -> list[tuple[str, int]]:
    import random

    rng = random.Random(seed)
    examples = [ex for c in TOKEN_CLASSES for ex in c.examples]
    separators = [" ", "\n", "\t", ":", "=", '"', "'", "\\", ".", "-", "_", "/", "é", "ı", "✓", "\U0001f600"]
    cases = []
    for _ in range(n):
        pieces = []
        for _ in range(rng.randrange(1, 25)):
            kind = rng.randrange(6)
            if kind == 0:
                pieces.append(rng.choice(examples))
            elif kind == 1:
                ex = rng.choice(examples)
                k = rng.randrange(len(ex) + 1)
                pieces.append(ex[:k] if rng.random() < 0.5 else ex[k:])
            elif kind == 2:
                pieces.append(rng.choice(separators))
            elif kind == 3:
                pieces.append("".join(rng.choice("abcXYZ019_-./+~=") for _ in range(rng.randrange(1, 30))))
            elif kind == 4:
                pieces.append("row 12 value=ok 3.14 " * rng.randrange(0, 400))
            else:
                pieces.append(
                    "Authorization: Bearer " if rng.random() < 0.5 else '{"authorization": "bearer '
                )
        cases.append(("".join(pieces), rng.choice((1, 7, 64, 8192))))
    return cases


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_stdio_streamed_output_equals_redacting_the_whole_text(seed):
    # Given texts of tokens, fragments, separators, non-ASCII and filler, written in random
    # fragments (str, print, bytes) with random batch sizes — ASCII and non-ASCII batches
    from sandbox_common.redaction.catalogue import redact

    cases = _stream_cases(seed, 40)
    # When streamed through the redactor in one interpreter, each case closed by a flush
    script = preamble_source() + "\n" + STREAM_SCRIPT.format(seed=seed)
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script],
        input=json.dumps(cases).encode(),
        capture_output=True,
        timeout=120,
    )
    # Then each case's output is exactly the catalogue's redaction of the whole text
    assert proc.returncode == 0, proc.stderr
    outputs = proc.stdout.decode("utf-8").split("\n", 1)[1].split("\x00CASE\x00")[:-1]
    assert len(outputs) == len(cases)
    for out, (text, _) in zip(outputs, cases, strict=True):
        assert out == redact(text)


LONG_TOKEN_SCRIPT = r"""
import sys
rt = sys.modules["_sbx_stdio_runtime"]
cat = sys.modules["_sbx_redaction_catalogue"]
rt.set_chunk_chars({chunk})
token = "ghp_" + "A1b2C3d4" * 5000  # 40 004 chars: longer than the hold-back
held = 0
sys.stdout.write("before ")
for i in range(0, len(token), 1000):
    sys.stdout.write(token[i : i + 1000])
    held = max(held, len(sys.stdout._pending))
sys.stdout.write(" after\n")
sys.stdout.flush()
sys.stderr.write("HELD=%d LIMIT=%d\n" % (held, cat.HOLD_CHARS))
"""


@pytest.mark.parametrize("chunk", [1, 32768], ids=["drain-every-write", "default-chunk"])
def test_stdio_token_longer_than_hold_back_redacted_whole_with_bounded_memory(chunk):
    # Given a 40 KiB token written in 1 000-char pieces (the redactor holds back ≤ HOLD_CHARS)
    code = LONG_TOKEN_SCRIPT.format(chunk=chunk)
    # When
    proc = run_sandboxed(code)
    # Then the whole run is one <redacted>: no fragment of it is written, before or after
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode().splitlines()[1:]
    assert out == ["before <redacted> after"]
    held, limit = (int(x.split("=")[1]) for x in proc.stderr.decode().split())
    assert held <= limit


def test_stdio_flush_inside_a_token_drops_its_continuation():
    # Given a token flushed mid-run, then more of its run, then other text
    token = TOKENS["github"]
    code = (
        "import sys\n"
        f"sys.stdout.write({token!r}); sys.stdout.flush()\n"
        "sys.stdout.write('MoreOfTheSameRun42 and then prose\\n')\n"
    )
    # When
    proc = run_sandboxed(code)
    # Then the continuation of the run is not written (as redacting the joined text would hide it)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().splitlines()[1:] == ["<redacted> and then prose"]
