"""The file tools (writeFiles, readFiles, listFiles, removeFiles): relative to the session's working
directory, which they refuse to leave, so they behave the same with or without a sandbox around
the process."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from .frames import MAX_READ_BYTES, bounded_message


def _resolve(path: str) -> str:
    base = os.getcwd()
    full = os.path.realpath(os.path.join(base, path))
    if full != base and not full.startswith(base + os.sep):
        raise PermissionError(f"path outside the session directory: {path}")
    return full


def _uri(full: str) -> str:
    """A resource URI relative to the session's working directory (`file://data/a.csv`), as
    the bedrock-agentcore SDK expects: its download_files keys the answer by the URI minus
    `file://`, i.e. by the path the caller asked for. Never the host's temp directory."""
    return "file://" + os.path.relpath(full, os.getcwd())


def tool_result(
    content: list[dict[str, Any]], error: str | None = None
) -> tuple[dict[str, Any], list[bytes]]:
    if error is not None:
        content = [{"type": "text", "text": bounded_message(error)}]
    return {
        "content": content,
        "is_error": error is not None,
        "exit_code": 1 if error else 0,
        "execution_time": 0.0,
        "fatal": False,
    }, []


def _error(exc: Exception) -> tuple[dict[str, Any], list[bytes]]:
    return tool_result([], f"{type(exc).__name__}: {exc}")


def write_files(args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
    try:
        items = args.get("content") or []
        for item in items:
            full = _resolve(item["path"])
            os.makedirs(os.path.dirname(full), exist_ok=True)
            data = (
                base64.b64decode(item["blob"])
                if item.get("blob") is not None
                else item.get("text", "").encode()
            )
            with open(full, "wb") as fh:
                fh.write(data)
        return tool_result([{"type": "text", "text": f"Successfully wrote all {len(items)} files"}])
    except (OSError, KeyError, ValueError) as exc:
        return _error(exc)


def read_files(args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
    """Each file is one content block, JSON-encoded here (once) and sent as a raw block, which
    the server streams into its own event without parsing it."""
    try:
        blocks: list[bytes] = []
        for path in args.get("paths") or []:
            full = _resolve(path)
            with open(full, "rb") as fh:
                data = fh.read(MAX_READ_BYTES + 1)
            if len(data) > MAX_READ_BYTES:
                raise ValueError(f"{path} is over the {MAX_READ_BYTES}-byte read limit")
            uri = _uri(full)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                # Base64 needs no JSON escaping: the block is assembled around it, not dumped.
                head = json.dumps(
                    {
                        "type": "resource",
                        "resource": {
                            "type": "blob",
                            "uri": uri,
                            "mimeType": "application/octet-stream",
                            "blob": "",
                        },
                    }
                )
                cut = head.rindex('""') + 1  # inside the empty blob string
                blocks.append(
                    head[:cut].encode("ascii") + base64.b64encode(data) + head[cut:].encode("ascii")
                )
                continue
            resource = {"type": "text", "uri": uri, "mimeType": "text/plain", "text": text}
            blocks.append(json.dumps({"type": "resource", "resource": resource}).encode("ascii"))
        answer, _ = tool_result([])
        return {**answer, "content": None}, blocks
    except (OSError, ValueError) as exc:
        return _error(exc)


def list_files(args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
    try:
        full = _resolve(args.get("directoryPath") or ".")
        blocks = []
        for entry in sorted(os.scandir(full), key=lambda e: e.name):
            is_dir = entry.is_dir(follow_symlinks=False)
            block = {
                "type": "resource_link",
                "uri": _uri(entry.path),
                "name": entry.name,
                "description": "directory" if is_dir else "file",
                "size": 0 if is_dir else entry.stat(follow_symlinks=False).st_size,
            }
            blocks.append(json.dumps(block).encode("ascii"))
        answer, _ = tool_result([])
        return {**answer, "content": None}, blocks
    except (OSError, ValueError) as exc:
        return _error(exc)


def remove_files(args: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
    try:
        paths = args.get("paths") or []
        for path in paths:
            os.remove(_resolve(path))
        return tool_result([{"type": "text", "text": f"Successfully removed {len(paths)} files"}])
    except (OSError, ValueError) as exc:
        return _error(exc)
