"""Files in and artifacts out against real parts: input files written into a local-interpreter session with
writeFiles, artifacts collected from it (outputs/ + open matplotlib figures), redacted host-side
and stored in moto's S3 — the runner-side modules dispatch calls."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import pytest
from sandbox_common import limits
from sandbox_common import naming as n
from sandbox_common.files import input_record
from sandbox_runtime.artifacts import ArtifactContext, ArtifactStore, collect_and_store
from sandbox_runtime.runner.errors import CrossTenantInterpreter
from sandbox_runtime.runner.tools import SessionFiles

from tests.integration.files.conftest import ACME_CI, BUCKET, GLOBEX_CI, LocalCredentials
from tests.integration.interpreter._helpers import invoke, make_client

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
BINARY = bytes(range(256)) * 64 + b"\xff\xfe\x00ghp_not_redacted_in_binary"


@pytest.fixture
def tools(files_interpreter: Any) -> SessionFiles:
    return SessionFiles(
        tenant_id="acme",
        allowed_interpreter_ids=frozenset({ACME_CI}),
        credentials=LocalCredentials(files_interpreter.endpoint),
    )


def run(files_interpreter: Any, session: str, code: str) -> dict[str, Any]:
    return invoke(make_client(files_interpreter.endpoint), ACME_CI, session, code)[0]


def collect(tools: SessionFiles, session: str, s3: Any, invocation: str = "inv-1") -> Any:
    ctx = ArtifactContext(tenant_id="acme", turn_id="turn-1", invocation_id=invocation, bucket=BUCKET)
    return collect_and_store(tools, ACME_CI, session, ctx, ArtifactStore(s3))


def stored(s3: Any, entry: dict[str, Any], invocation: str = "inv-1") -> bytes:
    key = n.artifact_key("acme", "turn-1", invocation, entry["filename"])
    return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def test_files_round_trip_binary_and_text_with_matching_sha256(
    files_interpreter, acme_session, tools, s3
) -> None:
    # Given a binary and a text input written into the session before the code
    text = b"region,amount\neu,3\nus,4\n"
    tools.write(ACME_CI, acme_session, [("data/in.bin", BINARY), ("data/sales.csv", text)])
    # When the code reads them at their relative paths and copies them to outputs/
    result = run(
        files_interpreter,
        acme_session,
        (
            "import hashlib, os, shutil\n"
            "os.makedirs('outputs', exist_ok=True)\n"
            "shutil.copy('data/in.bin', 'outputs/copy.bin')\n"
            "shutil.copy('data/sales.csv', 'outputs/sales.csv')\n"
            "print(hashlib.sha256(open('data/in.bin','rb').read()).hexdigest())\n"
        ),
    )
    collected = collect(tools, acme_session, s3)
    # Then the code saw the exact bytes
    assert result["exitCode"] == 0
    assert result["stdout"].strip() == input_record("data/in.bin", BINARY)["sha256"]
    # And both came back as artifacts whose stored bytes match the inputs' sha256
    by_name = {f["filename"]: f for f in collected.files}
    assert sorted(by_name) == ["copy.bin", "sales.csv"]
    assert by_name["copy.bin"]["sha256"] == hashlib.sha256(BINARY).hexdigest()
    assert stored(s3, by_name["copy.bin"]) == BINARY
    assert stored(s3, by_name["sales.csv"]) == text
    assert by_name["sales.csv"]["content_type"] == "text/csv"
    assert by_name["copy.bin"]["bytes"] == len(BINARY)
    assert by_name["copy.bin"]["file_id"].startswith(n.FILE_ID_PREFIX)
    assert by_name["copy.bin"]["created_at"].endswith("Z")
    # And the audit records carry exactly file_id, filename, bytes, sha256
    assert sorted(collected.artifacts[0]) == ["bytes", "file_id", "filename", "sha256"]
    assert collected.failure_reason is None


def test_token_in_text_artifact_is_redacted_binary_stored_exact(
    files_interpreter, acme_session, tools, s3
) -> None:
    # Given code that writes a token into a text artifact and into a binary one
    run(
        files_interpreter,
        acme_session,
        (
            "import os\nos.makedirs('outputs', exist_ok=True)\n"
            f"open('outputs/report.txt','w').write('key={TOKEN}\\n')\n"
            f"open('outputs/blob.bin','wb').write(b'\\xff\\xfe' + b'{TOKEN}')\n"
        ),
    )
    # When collected
    collected = collect(tools, acme_session, s3)
    by_name = {f["filename"]: f for f in collected.files}
    # Then the stored text has no token, and its sha256 is of the stored (redacted) bytes
    report = stored(s3, by_name["report.txt"])
    assert TOKEN not in report.decode()
    assert "<redacted>" in report.decode()
    assert by_name["report.txt"]["sha256"] == hashlib.sha256(report).hexdigest()
    # And the binary one is byte-exact (no redaction of non-UTF-8 data)
    assert stored(s3, by_name["blob.bin"]) == b"\xff\xfe" + TOKEN.encode()


def test_only_new_or_changed_outputs_are_collected(files_interpreter, acme_session, tools, s3) -> None:
    # Given two outputs collected once
    run(
        files_interpreter,
        acme_session,
        "import os\nos.makedirs('outputs', exist_ok=True)\n"
        "open('outputs/a.txt','w').write('a')\nopen('outputs/b.txt','w').write('b')\n",
    )
    first = collect(tools, acme_session, s3, "inv-1")
    # When nothing changes, then one file changes
    unchanged = collect(tools, acme_session, s3, "inv-2")
    run(files_interpreter, acme_session, "open('outputs/b.txt','w').write('b2, longer')\n")
    changed = collect(tools, acme_session, s3, "inv-3")
    # Then the first call has both, the second none, the third only the changed one
    assert sorted(f["filename"] for f in first.files) == ["a.txt", "b.txt"]
    assert unchanged.files == []
    assert [f["filename"] for f in changed.files] == ["b.txt"]
    assert stored(s3, changed.files[0], "inv-3") == b"b2, longer"


def test_21_artifacts_store_20_and_list_one_too_many(files_interpreter, acme_session, tools, s3) -> None:
    # Given code writing 21 outputs
    run(
        files_interpreter,
        acme_session,
        "import os\nos.makedirs('outputs', exist_ok=True)\n"
        "for i in range(21): open(f'outputs/f{i:02d}.txt','w').write(str(i))\n",
    )
    # When collected
    collected = collect(tools, acme_session, s3)
    # Then 20 are stored and the 21st is listed as skipped: too_many, not stored
    stored_entries = [f for f in collected.files if "file_id" in f]
    skipped = [f for f in collected.files if "skipped" in f]
    assert len(stored_entries) == 20 and len(collected.artifacts) == 20
    assert skipped == [{"filename": "f20.txt", "bytes": 2, "skipped": n.SKIPPED_TOO_MANY}]
    keys = s3.list_objects_v2(Bucket=BUCKET, Prefix="acme/turn-1/inv-1/").get("Contents", [])
    assert len(keys) == 20


def test_oversized_artifact_is_listed_too_large_and_not_stored(
    files_interpreter, acme_session, tools, s3
) -> None:
    # Given one output one byte over 25 MiB (sparse: cheap to make) and a small one
    run(
        files_interpreter,
        acme_session,
        "import os\nos.makedirs('outputs', exist_ok=True)\n"
        f"f = open('outputs/huge.bin','wb'); f.truncate({limits.MAX_ARTIFACT_BYTES + 1}); f.close()\n"
        "open('outputs/small.txt','w').write('ok')\n",
    )
    # When collected
    collected = collect(tools, acme_session, s3)
    # Then the big one is listed too_large and only the small one is stored
    assert {
        "filename": "huge.bin",
        "bytes": limits.MAX_ARTIFACT_BYTES + 1,
        "skipped": n.SKIPPED_TOO_LARGE,
    } in collected.files
    assert [a["filename"] for a in collected.artifacts] == ["small.txt"]
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="acme/turn-1/").get("Contents", [])]
    assert keys == ["acme/turn-1/inv-1/small.txt"]


def test_large_artifact_is_read_in_parts_byte_exact(files_interpreter, acme_session, tools, s3) -> None:
    # Given a 20 MiB binary output (bigger than one read part)
    run(
        files_interpreter,
        acme_session,
        "import os\nos.makedirs('outputs', exist_ok=True)\n"
        "open('outputs/big.bin','wb').write(os.urandom(20 * 1024 * 1024))\n"
        "import hashlib\nprint(hashlib.sha256(open('outputs/big.bin','rb').read()).hexdigest())\n",
    )
    expected = run(
        files_interpreter,
        acme_session,
        "print(__import__('hashlib').sha256(open('outputs/big.bin','rb').read()).hexdigest())",
    )
    # When collected (counting the file tools it calls)
    calls: list[str] = []
    real_call = tools.call

    def counting_call(interpreter_id: str, session_id: str, name: str, arguments: dict[str, Any]) -> Any:
        calls.append(name)
        return real_call(interpreter_id, session_id, name, arguments)

    tools.call = counting_call  # type: ignore[method-assign]
    collected = collect(tools, acme_session, s3)
    # Then the stored object is the same 20 MiB
    entry = collected.files[0]
    assert entry["bytes"] == 20 * 1024 * 1024
    # And it took one helper run, one answer read and 3 part reads (20 x 1 MiB parts, 8 per call)
    assert calls == ["executeCode", "readFiles", "readFiles", "readFiles", "readFiles"]
    assert entry["sha256"] == expected["stdout"].strip()
    assert hashlib.sha256(stored(s3, entry)).hexdigest() == entry["sha256"]


def test_open_matplotlib_figures_are_saved_as_png_and_closed(
    files_interpreter, acme_session, tools, s3
) -> None:
    # Given code that plots two figures and leaves them open (Agg, the runtime default)
    result = run(
        files_interpreter,
        acme_session,
        (
            "import matplotlib\nimport matplotlib.pyplot as plt\n"
            "plt.figure(); plt.plot([1, 2, 3])\nplt.figure(); plt.bar(['a', 'b'], [3, 4])\n"
            "print(matplotlib.get_backend())\n"
        ),
    )
    assert result["stdout"].strip().lower() == "agg"
    # When collected
    collected = collect(tools, acme_session, s3)
    # Then both figures are stored as figure-N.png (real PNGs) and no figure is left open
    names = sorted(f["filename"] for f in collected.files)
    assert names == ["figure-1.png", "figure-2.png"]
    assert all(stored(s3, f).startswith(b"\x89PNG\r\n\x1a\n") for f in collected.files)
    assert {f["content_type"] for f in collected.files} == {"image/png"}
    left = run(
        files_interpreter, acme_session, "import matplotlib.pyplot as plt\nprint(len(plt.get_fignums()))"
    )
    assert left["stdout"].strip() == "0"


def test_pointer_names_object_under_the_callers_tenant(files_interpreter, acme_session, tools, s3) -> None:
    # Given one stored artifact
    run(
        files_interpreter,
        acme_session,
        "import os\nos.makedirs('outputs', exist_ok=True)\nopen('outputs/x.txt','w').write('x')\n",
    )
    entry = collect(tools, acme_session, s3).files[0]
    # When its file_id pointer is read / Then it names the acme object, and only under acme/
    pointer = json.loads(
        s3.get_object(Bucket=BUCKET, Key=n.file_pointer_key("acme", entry["file_id"]))["Body"].read()
    )
    assert pointer["key"] == "acme/turn-1/inv-1/x.txt"
    head = s3.head_object(Bucket=BUCKET, Key=pointer["key"])
    assert head["Metadata"][n.META_FILE_ID] == entry["file_id"]
    assert head["Metadata"][n.META_SHA256] == entry["sha256"]


def test_session_files_refuse_another_tenants_interpreter_before_any_call(files_interpreter, tools) -> None:
    # Given acme's tools / When asked to write into globex's interpreter / Then refused, nothing sent
    with pytest.raises(CrossTenantInterpreter):
        tools.write(GLOBEX_CI, "01ARZ3NDEKTSV4RRFFQ69G5FAV", [("a.txt", b"x")])


def test_collection_failure_leaves_no_artifacts_and_says_why(
    files_interpreter, acme_session, tools, s3
) -> None:
    # Given code that replaced the helper's state directory with a file (so the helper fails)
    run(files_interpreter, acme_session, "open('.sandbox','w').write('not a directory')")
    # When collected / Then nothing stored, and the failure is reported, not raised
    collected = collect(tools, acme_session, s3)
    assert collected.files == [] and collected.artifacts == []
    assert collected.failure_reason is not None and collected.failure_reason.startswith("artifacts:")
    assert os.environ.get("AWS_ENDPOINT_URL")  # moto, never real AWS


@pytest.mark.parametrize(
    "forged",
    [
        {
            "filename": "../../globex/turn-1/x.txt",
            "path": "outputs/../../globex/turn-1/x.txt",
            "bytes": 1,
            "parts": [],
        },
        {"filename": "x.txt", "path": "/etc/passwd", "bytes": 1, "parts": []},
        {
            "filename": "_files/file-AAAAAAAAAAAAAAAAAAAAAAAA.json",
            "path": "outputs/_files/file-AAAAAAAAAAAAAAAAAAAAAAAA.json",
            "bytes": 1,
            "parts": [],
        },
        {"filename": "x.txt", "path": "outputs/x.txt", "bytes": 1, "parts": ["/etc/passwd"]},
        {"filename": "x.txt", "path": "outputs/x.txt", "bytes": -1, "parts": []},
    ],
)
def test_forged_collection_answer_stores_nothing_outside_the_rules(
    files_interpreter, acme_session, tools, s3, forged
) -> None:
    # Given session code that forges the collector's answer file to escape the tenant prefix or
    # read outside outputs/ (it cannot stop the helper from rewriting it, so it replaces the helper's
    # json.dump for this one call)
    run(
        files_interpreter,
        acme_session,
        (
            "import json, os\nos.makedirs('outputs', exist_ok=True)\nopen('outputs/x.txt','w').write('x')\n"
            f"_forged = {forged!r}\n"
            "_real_dump = json.dump\n"
            "def _dump(obj, fh, *a, **k):\n"
            "    if isinstance(obj, dict) and 'items' in obj:\n"
            "        obj = {'items': [dict(_forged, sha256='0' * 64)], 'figures': []}\n"
            "    return _real_dump(obj, fh, *a, **k)\n"
            "json.dump = _dump\n"
        ),
    )
    # When collected
    collected = collect(tools, acme_session, s3)
    # Then nothing is stored, and the forgery is reported
    assert collected.artifacts == []
    assert collected.failure_reason in ("artifacts:forged_entry", "artifacts:sha256_mismatch")
    assert s3.list_objects_v2(Bucket=BUCKET).get("Contents", []) == []


class _CountingFiles(SessionFiles):
    """The real file tools, recording each tool call's name (what reaches the interpreter)."""

    def __init__(self, inner: SessionFiles) -> None:
        super().__init__(
            tenant_id=inner.tenant_id,
            allowed_interpreter_ids=inner.allowed_interpreter_ids,
            credentials=inner.credentials,
        )
        self.names: list[str] = []

    def call(self, interpreter_id: str, session_id: str, name: str, arguments: dict[str, Any]) -> Any:
        self.names.append(name)
        return super().call(interpreter_id, session_id, name, arguments)


def test_collection_that_finds_nothing_skips_reading_the_answer(
    files_interpreter, acme_session, tools, s3
) -> None:
    # Given a session whose outputs were collected once, then code that writes no outputs
    run(
        files_interpreter,
        acme_session,
        "import os\nos.makedirs('outputs', exist_ok=True)\nopen('outputs/a.txt','w').write('a')\n",
    )
    counting = _CountingFiles(tools)
    first = collect(counting, acme_session, s3, "inv-1")
    first_calls = list(counting.names)
    run(files_interpreter, acme_session, "x = 1")
    # When collected again
    counting.names.clear()
    second = collect(counting, acme_session, s3, "inv-2")
    # Then the helper alone answered "nothing" (no readFiles on the critical path),
    # while the first collection read its answer and its file
    assert second.files == [] and second.artifacts == [] and second.failure_reason is None
    assert counting.names == ["executeCode"]
    assert [f["filename"] for f in first.files] == ["a.txt"]
    assert first_calls == ["executeCode", "readFiles", "readFiles"]


def test_collection_with_stdout_swallowed_falls_back_to_reading_the_answer(
    files_interpreter, acme_session, tools, s3
) -> None:
    # Given session code that swallows stdout, so the helper's "nothing new" line never arrives
    run(files_interpreter, acme_session, "import io, sys\nsys.stdout = io.StringIO()\n")
    counting = _CountingFiles(tools)
    # When collected (nothing new under outputs/)
    collected = collect(counting, acme_session, s3)
    # Then the answer file was read as before (no marker is never taken as "nothing"), and it is empty
    assert counting.names == ["executeCode", "readFiles"]
    assert collected.files == [] and collected.failure_reason is None


def png_chunk_types(data: bytes) -> list[bytes]:
    types, at = [], 8
    while at + 8 <= len(data):
        length = int.from_bytes(data[at : at + 4], "big")
        types.append(data[at + 4 : at + 8])
        at += 12 + length
    return types


def test_png_text_chunks_are_dropped_and_the_png_still_decodes(
    files_interpreter, acme_session, tools, s3
) -> None:
    # Given a matplotlib PNG whose metadata holds a token (tEXt, and iTXt for non-latin-1 text),
    # and an open figure the collector saves itself
    made = run(
        files_interpreter,
        acme_session,
        (
            "import os\nimport matplotlib.pyplot as plt\nos.makedirs('outputs', exist_ok=True)\n"
            "fig = plt.figure(); plt.plot([1, 2, 3])\n"
            f"fig.savefig('outputs/plot.png', metadata={{'Comment': {TOKEN!r}, 'Title': '✓ ' + {TOKEN!r}}})\n"
            "print(open('outputs/plot.png', 'rb').read().count(b'ghp_'))\n"
        ),
    )
    assert int(made["stdout"]) == 2  # the token really is in the file matplotlib wrote
    # When collected
    collected = collect(tools, acme_session, s3)
    by_name = {f["filename"]: f for f in collected.files}
    assert sorted(by_name) == ["figure-1.png", "plot.png"]
    for entry in by_name.values():
        body = stored(s3, entry)
        # Then no token and no text chunk is stored, the digest is of the stored bytes
        assert b"ghp_" not in body
        assert not {b"tEXt", b"zTXt", b"iTXt"} & set(png_chunk_types(body))
        assert png_chunk_types(body)[-1] == b"IEND"
        assert entry["sha256"] == hashlib.sha256(body).hexdigest()
    # And the stored PNG still decodes to the same image
    tools.write(ACME_CI, acme_session, [("check/plot.png", stored(s3, by_name["plot.png"]))])
    same = run(
        files_interpreter,
        acme_session,
        (
            "import matplotlib.image as im, numpy as np\n"
            "print(np.array_equal(im.imread('check/plot.png'), im.imread('outputs/plot.png')))\n"
        ),
    )
    assert same["stdout"].strip() == "True"
