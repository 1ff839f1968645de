"""The redaction corpus (tests/support/redaction_corpus.py) through layer 1, the in-sandbox stdio
redactor, run as the sandbox runs it: a fresh interpreter behind the readiness preamble, the text
split across writes. Zero complete tokens survive, no fragment longer than the token's prefix plus
4 characters, and nothing is redacted that redacting the whole text would keep. The other layers:
tests/unit/redaction/test_corpus.py."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys

import pytest
from sandbox_common.redaction.stdio import preamble_source
from sandbox_runtime.runner.execution import host_redactor

from tests.support.redaction_corpus import corpus, leaks

CASES = corpus()


STDIO_SCRIPT = r"""
import json, sys
rt = sys.modules["_sbx_stdio_runtime"]
rt.set_chunk_chars({chunk})
for i, pieces in enumerate(json.load(open({path!r}))):
    for piece in pieces:
        sys.stdout.write(piece)
    sys.stdout.write("\n@@CASE %d@@\n" % i)
"""


def _split(rng: random.Random, text: str) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randrange(0, 5))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@pytest.mark.parametrize("chunk", [1, 32768], ids=["drain-every-write", "default-chunk"])
def test_layer1_stdio_redactor_leaves_no_token_of_the_corpus(chunk, tmp_path):
    # Given every case split at random offsets into up to five writes, in a fresh interpreter
    # behind the readiness preamble (exactly what runs in the sandbox)
    rng = random.Random(chunk)
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps([_split(rng, case.text) for case in CASES]))
    script = preamble_source() + "\n" + STDIO_SCRIPT.format(chunk=chunk, path=str(path))
    # When
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script], capture_output=True, timeout=300, check=False
    )
    # Then every case's output is there and shows no token
    assert proc.returncode == 0, proc.stderr[-2000:]
    parts = re.split(r"\n@@CASE (\d+)@@\n", proc.stdout.decode().split("\n", 1)[1])
    outputs = {int(parts[k]): parts[k - 1] for k in range(1, len(parts), 2)}
    assert sorted(outputs) == list(range(len(CASES)))
    assert leaks(outputs, CASES) == []
    # and the stream wrote exactly what redacting each whole text gives (no over-redaction)
    redact = host_redactor(None)
    assert [c.name for i, c in enumerate(CASES) if outputs[i] != redact(c.text)] == []
