"""Redaction evidence for the report: the shared corpus through every layer, and
validation answers that never echo input. The unit suites (tests/unit/redaction) hold the
detailed checks; this records the figures."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from backstop import scanner
from sandbox_common.errors import SandboxInvalidRequest
from sandbox_common.models import parse_dispatch_event
from sandbox_common.redaction.cloudwatch import data_protection_policy
from sandbox_common.redaction.stdio import preamble_source
from sandbox_runtime.runner.execution import host_redactor

from tests.support.redaction_corpus import LENGTHS, corpus, leak, mask

CASES = corpus()
RESIDUAL = (
    "not covered (residual classes): secrets of unknown shape; encoded, compressed or split forms of a "
    "catalogue token (only registered exact values are matched in their base64/URL/hex forms); a bare "
    "AWS secret access key without its key id (only CloudWatch's managed AwsSecretKey identifier); "
    "output flushed in the middle of a token's first characters (flush() emits what it has)"
)


def _summary(outputs: dict[int, str]) -> tuple[int, int]:
    complete = sum(1 for i, c in enumerate(CASES) if c.secret in outputs[i])
    partial = sum(1 for i, c in enumerate(CASES) if leak(outputs[i], c))
    return complete, partial


def test_redaction_corpus_through_every_layer(record: Any, tmp_path: Path) -> None:
    # Given the corpus (every class × boundary cases × lengths up to 20 KiB)
    classes = Counter(c.token_class for c in CASES)
    # When it goes through layer 1 (in-sandbox stdio, one write per case), 2 (host), 4 (backstop
    # scan) and the CloudWatch custom identifiers (evaluated anchored at run starts, see
    # tests/unit/redaction/test_corpus.py)
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps([c.text for c in CASES]))
    code = (
        "import json, sys\n"
        f"for i, t in enumerate(json.load(open({str(path)!r}))):\n"
        "    sys.stdout.write(t); sys.stdout.write('\\n@@CASE %d@@\\n' % i)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", preamble_source() + "\n" + code],
        capture_output=True,
        timeout=300,
        check=True,
    )
    parts = re.split(r"\n@@CASE (\d+)@@\n", proc.stdout.decode().split("\n", 1)[1])
    layer1 = {int(parts[k]): parts[k - 1] for k in range(1, len(parts), 2)}
    redact = host_redactor(None)
    layer2 = {i: redact(c.text) for i, c in enumerate(CASES)}
    layer4 = {i: mask(c.text, [(h.start, h.end) for h in scanner.scan(c.text)]) for i, c in enumerate(CASES)}
    regexes = []
    for entry in data_protection_policy("/findings")["Configuration"]["CustomDataIdentifier"]:
        rx = entry["Regex"]
        regexes.append(re.compile(f"(?<![A-Za-z0-9_-])(?:{rx})" if rx.startswith("[A-Za-z0-9_-]") else rx))
    layer3 = {
        i: mask(c.text, [(m.start(), m.end()) for rx in regexes for m in rx.finditer(c.text)])
        for i, c in enumerate(CASES)
    }
    results = {
        name: _summary(out)
        for name, out in (
            ("layer 1", layer1),
            ("layer 2", layer2),
            ("layer 3 (CW identifiers)", layer3),
            ("layer 4", layer4),
        )
    }
    # Then no complete token and no fragment longer than prefix + 4 survives anywhere
    figures = "; ".join(f"{k}: {a} complete, {b} partial" for k, (a, b) in results.items())
    record(
        "redaction",
        check=f"corpus of {len(CASES)} cases ({dict(classes)}; lengths {', '.join(LENGTHS)}; "
        "word characters glued before/after, JSON, quotes) through every layer",
        figures=figures + ". " + RESIDUAL,
    )
    assert sorted(layer1) == list(range(len(CASES)))
    assert all(v == (0, 0) for v in results.values()), results


def test_redaction_validation_never_echoes_input(record: Any) -> None:
    # Given invalid events whose unknown field names are secrets, and code with NUL
    base = {
        "action": "execute_code",
        "tenant_id": "acme",
        "agent_id": "a",
        "template_id": "t",
        "turn_id": "t1",
        "call_id": "c1",
        "code": "print(1)",
    }
    names = [c.secret for c in CASES if len(c.secret) < 200][:50]
    echoed = 0
    for name in names:
        try:
            parse_dispatch_event({**base, name: 1})
        except SandboxInvalidRequest as exc:
            echoed += name[:8] in exc.message
    try:
        parse_dispatch_event({**base, "code": "print(1)\x00"})
        nul = "accepted"
    except SandboxInvalidRequest as exc:
        nul = exc.error
    record(
        "redaction",
        check="validation answers: unknown field named like a token; code with NUL",
        figures=f"{len(names)} token-named fields, echoed {echoed}; NUL code -> {nul}",
    )
    assert len(names) == 50 and echoed == 0 and nul == "SandboxInvalidRequest"
