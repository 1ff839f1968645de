"""Input files: every bad entry is a SandboxInvalidRequest at parse time (before quota);
s3 inputs outside the tenant's data.read prefixes are refused by check_s3_inputs."""

from __future__ import annotations

import base64
import hashlib

import pytest
from sandbox_common import limits
from sandbox_common.errors import SandboxInvalidRequest
from sandbox_common.files import (
    GetFileRequest,
    InputFile,
    check_s3_inputs,
    input_record,
    is_under,
    parse_s3_uri,
)
from sandbox_common.models import ExecuteCodeRequest, parse_dispatch_event

BASE = {
    "action": "execute_code",
    "tenant_id": "acme",
    "agent_id": "agent-7",
    "template_id": "analyst",
    "turn_id": "turn-123",
    "call_id": "call-9",
    "code": "print(open('data/a.csv').read())",
}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def with_files(*files: dict) -> dict:
    return {**BASE, "files": list(files)}


BAD = {
    "dotdot": with_files({"path": "data/../../etc/passwd", "content_base64": b64(b"x")}),
    "dotdot_alone": with_files({"path": "..", "content_base64": b64(b"x")}),
    "absolute": with_files({"path": "/etc/passwd", "content_base64": b64(b"x")}),
    "backslash_absolute": with_files({"path": "\\etc\\passwd", "content_base64": b64(b"x")}),
    "nul": with_files({"path": "a\x00.csv", "content_base64": b64(b"x")}),
    "empty_path": with_files({"path": "", "content_base64": b64(b"x")}),
    "trailing_slash": with_files({"path": "data/", "content_base64": b64(b"x")}),
    "path_256_bytes": with_files({"path": "a" * 256, "content_base64": b64(b"x")}),
    "too_many": with_files(*({"path": f"f{i}.txt", "content_base64": b64(b"x")} for i in range(21))),
    "inline_over_3mib": with_files(
        {"path": "big.bin", "content_base64": b64(b"\0" * (limits.MAX_INLINE_INPUT_BYTES + 1))}
    ),
    "inline_total_over_3mib": with_files(
        {"path": "a.bin", "content_base64": b64(b"\0" * (limits.MAX_INLINE_INPUT_BYTES // 2 + 1))},
        {"path": "b.bin", "content_base64": b64(b"\0" * (limits.MAX_INLINE_INPUT_BYTES // 2 + 1))},
    ),
    "bad_base64": with_files({"path": "a.bin", "content_base64": "not base64!!"}),
    "both_sources": with_files({"path": "a", "content_base64": b64(b"x"), "s3_uri": "s3://acme-data/in/a"}),
    "no_source": with_files({"path": "a"}),
    "not_s3": with_files({"path": "a", "s3_uri": "https://example.com/a"}),
    "s3_no_key": with_files({"path": "a", "s3_uri": "s3://acme-data/"}),
    "duplicate_path": with_files(
        {"path": "a", "content_base64": b64(b"1")}, {"path": "a", "content_base64": b64(b"2")}
    ),
    "extra_field": with_files({"path": "a", "content_base64": b64(b"x"), "mode": "0777"}),
    "files_not_list": {**BASE, "files": {"path": "a"}},
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_parse_dispatch_event_rejects_bad_input_files(name: str) -> None:
    # Given an execute_code event with one bad files entry / When parsed
    with pytest.raises(SandboxInvalidRequest) as info:
        parse_dispatch_event(BAD[name])
    # Then a named error whose sentence points at `files`, never echoing the content
    assert info.value.to_response()["error"] == "SandboxInvalidRequest"
    assert "files" in info.value.message
    assert "A" * 100 not in info.value.message


def test_parse_dispatch_event_accepts_exactly_the_limits() -> None:
    # Given 20 files whose inline content totals exactly 3 MiB and a 255-byte path
    size = limits.MAX_INLINE_INPUT_BYTES // 20
    files = [{"path": f"d/{i:02d}.bin", "content_base64": b64(b"\1" * size)} for i in range(19)]
    files.append(
        {"path": "p" * 255, "content_base64": b64(b"\1" * (limits.MAX_INLINE_INPUT_BYTES - 19 * size))}
    )
    # When parsed
    request = parse_dispatch_event(with_files(*files))
    # Then every file is there with its decoded bytes
    assert isinstance(request, ExecuteCodeRequest) and request.files is not None
    assert len(request.files) == 20
    assert sum(len(f.data) for f in request.files) == limits.MAX_INLINE_INPUT_BYTES


def test_execute_code_without_files_is_part_one_request() -> None:
    request = parse_dispatch_event(BASE)
    assert isinstance(request, ExecuteCodeRequest)
    assert request.files is None


def test_check_s3_inputs_accepts_uri_under_tenant_prefix() -> None:
    # Given an s3 input under the tenant's read prefix (configured without the trailing /)
    request = parse_dispatch_event(
        with_files({"path": "in/sales.csv", "s3_uri": "s3://acme-data/in/2026/sales.csv"})
    )
    assert isinstance(request, ExecuteCodeRequest)
    # When checked / Then no error
    check_s3_inputs(request.files, ["s3://acme-data/in"])


@pytest.mark.parametrize(
    "uri",
    [
        "s3://acme-data/input/x.csv",
        "s3://acme-data/secret/x.csv",
        "s3://globex-data/in/x.csv",
        "s3://acme-data-2/in/x",
    ],
)
def test_check_s3_inputs_refuses_uri_outside_tenant_prefixes(uri: str) -> None:
    # Given an s3 input outside every read prefix (a sibling folder sharing a name prefix included)
    request = parse_dispatch_event(with_files({"path": "x.csv", "s3_uri": uri}))
    assert isinstance(request, ExecuteCodeRequest)
    # When checked / Then refused without naming the tenant's prefixes
    with pytest.raises(SandboxInvalidRequest) as info:
        check_s3_inputs(request.files, ["s3://acme-data/in/"])
    assert "acme-data/in" not in info.value.message


def test_check_s3_inputs_refuses_any_uri_when_tenant_has_no_data() -> None:
    request = parse_dispatch_event(with_files({"path": "x.csv", "s3_uri": "s3://acme-data/in/x.csv"}))
    assert isinstance(request, ExecuteCodeRequest)
    with pytest.raises(SandboxInvalidRequest):
        check_s3_inputs(request.files, [])


# Keys a plain prefix test on "s3://acme-data/acme/" accepts but that may name another folder
# to whatever copies or logs them.
TRICK_KEYS = {
    "dotdot": "acme/../globex/x.csv",
    "dot": "acme/./x.csv",
    "pct_dotdot": "acme/%2e%2e/globex/x.csv",
    "pct_dotdot_upper": "acme/%2E%2E/globex/x.csv",
    "pct_slash": "acme/..%2fglobex/x.csv",
    "fullwidth_dots": "acme/\uff0e\uff0e/globex/x.csv",
    "one_dot_leader": "acme/\u2024\u2024/globex/x.csv",
    "fullwidth_solidus": "acme/..\uff0fglobex/x.csv",
    "non_nfc": "acme/cafe\u0301.csv",
    "newline": "acme/x.csv\nglobex/y.csv",
    "carriage_return": "acme/x\r.csv",
    "tab": "acme/x\t.csv",
    "zero_width": "acme/\u200b../globex/x.csv",
    "empty_segment": "acme//x.csv",
    "trailing_slash": "acme/x/",
    "backslash": "acme/..\\globex\\x.csv",
}


@pytest.mark.parametrize("name", sorted(TRICK_KEYS))
def test_parse_dispatch_event_rejects_s3_key_that_is_not_plain(name: str) -> None:
    # Given an s3_uri whose key starts with the tenant's prefix but is not plain
    uri = f"s3://acme-data/{TRICK_KEYS[name]}"
    assert uri.startswith("s3://acme-data/acme/")
    # When parsed / Then a named error before anything is counted, and no (bucket, key) to copy
    with pytest.raises(SandboxInvalidRequest) as info:
        parse_dispatch_event(with_files({"path": "x.csv", "s3_uri": uri}))
    assert "files" in info.value.message
    with pytest.raises(ValueError):
        parse_s3_uri(uri)


@pytest.mark.parametrize("name", sorted(TRICK_KEYS))
def test_check_s3_inputs_refuses_key_that_is_not_plain(name: str) -> None:
    # Given an input built without validation (model_construct) carrying a trick key
    item = InputFile.model_construct(path="x.csv", s3_uri=f"s3://acme-data/{TRICK_KEYS[name]}")
    # When checked against the tenant's prefix / Then refused: the prefix test is a containment test
    assert not is_under(item.s3_uri or "", ["s3://acme-data/acme/"])
    with pytest.raises(SandboxInvalidRequest):
        check_s3_inputs([item], ["s3://acme-data/acme/"])


def test_parse_s3_uri_accepts_plain_keys_with_dots_and_unicode() -> None:
    # Given keys that are plain: dots inside names, NFC non-ASCII text, spaces
    for key in ("acme/in/sales.2026.csv", "acme/in/...hidden", "acme/caf\u00e9/x.csv", "acme/a b.csv"):
        # When parsed / Then kept as is
        assert parse_s3_uri(f"s3://acme-data/{key}") == ("acme-data", key)
    assert is_under("s3://acme-data/acme/caf\u00e9/x.csv", ["s3://acme-data/acme/"])


def test_is_under_treats_prefix_as_folder() -> None:
    assert is_under("s3://bkt/in/x", ["s3://bkt/in"])
    assert not is_under("s3://bkt/inbox/x", ["s3://bkt/in"])


def test_input_record_has_path_bytes_sha256() -> None:
    assert input_record("a.bin", b"abc") == {
        "path": "a.bin",
        "bytes": 3,
        "sha256": hashlib.sha256(b"abc").hexdigest(),
    }


@pytest.mark.parametrize(
    "file_id", ["", "file-short", "../file-xxxxxxxxxxxxxxxxxxxxxxxxx", "x" * 30, "file-" + "a" * 65]
)
def test_get_file_request_rejects_malformed_file_id(file_id: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        GetFileRequest.model_validate({"action": "get_file", "tenant_id": "acme", "file_id": file_id})
