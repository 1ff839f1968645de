"""The session runtime: local sessions run on the pinned venv with the data-science
libraries, matplotlib on Agg, and the readiness preamble still installs and proves the redactor."""

from __future__ import annotations

from pathlib import Path

from sandbox_common.redaction.stdio import check_readiness, preamble_source

from tests.integration.files.conftest import ACME_CI, ROOT, SESSION_PYTHON
from tests.integration.interpreter._helpers import invoke, make_client

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def _pins() -> dict[str, str]:
    lines = (ROOT / "infra/local/interpreter/session-requirements.txt").read_text().splitlines()
    return dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))


def test_session_runtime_has_pinned_libraries_agg_and_a_working_redactor(
    files_interpreter, acme_session
) -> None:
    client = make_client(files_interpreter.endpoint)
    # Given a fresh session on the session runtime / When the readiness preamble runs first
    ready = invoke(client, ACME_CI, acme_session, preamble_source())[0]
    # Then the redactor is proven installed there
    assert ready["exitCode"] == 0 and check_readiness(ready["stdout"])
    # And the libraries agents reach for import at their pinned versions, matplotlib on Agg
    probe = invoke(
        client,
        ACME_CI,
        acme_session,
        "import importlib.metadata as m, matplotlib, os, sys\n"
        "import numpy, pandas, scipy, pyarrow, requests, openpyxl, matplotlib.pyplot\n"
        "print(os.path.dirname(os.path.dirname(numpy.__file__)))\nprint(matplotlib.get_backend())\n"
        "for p in ('numpy', 'pandas', 'matplotlib', 'scipy', 'pyarrow', 'requests', 'openpyxl'):\n"
        "    print(p, m.version(p))\n"
        f"print({TOKEN!r})\n",
    )[0]
    lines = probe["stdout"].splitlines()
    assert probe["exitCode"] == 0, probe["stderr"]
    assert Path(lines[0]).is_relative_to(SESSION_PYTHON.parent.parent)  # the runtime's site-packages
    assert lines[1].lower() == "agg"
    pins = _pins()
    assert dict(line.split(" ") for line in lines[2:9]) == {
        p: pins[p] for p in ("numpy", "pandas", "matplotlib", "scipy", "pyarrow", "requests", "openpyxl")
    }
    # And what the code prints still passes through the redactor
    assert TOKEN not in probe["stdout"] and lines[9] == "<redacted>"
    assert probe["stderr"] == ""


def test_session_cannot_modify_the_session_runtime(files_interpreter, acme_session) -> None:
    # Given the runtime's site-packages / When session code tries to write there / Then refused
    site = invoke(
        make_client(files_interpreter.endpoint),
        ACME_CI,
        acme_session,
        "import numpy, os\ntry:\n    open(os.path.join(os.path.dirname(numpy.__file__), 'evil.py'), 'w')\n"
        "    print('written')\nexcept OSError as e:\n    print(type(e).__name__)",
    )[0]
    assert site["stdout"].strip() in ("PermissionError", "OSError")
