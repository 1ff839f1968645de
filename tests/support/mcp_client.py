"""The official MCP SDK's client driving `sandboxctl mcp` over stdio, as a desktop host would: one
MCP session per `run_mcp` (the server's one turn), and what its tool results carry."""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.support.local_stack import SANDBOXCTL

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def mcp_args(
    tenant_id: str, template_id: str, turn_id: str | None = None, *, local: bool = True
) -> list[str]:
    """`sandboxctl [--local] mcp` for one tenant's template (agent mcp-agent)."""
    args = ["--local"] if local else []
    args += ["mcp", "--tenant", tenant_id, "--agent", "mcp-agent", "--template", template_id]
    return args + (["--turn", turn_id] if turn_id else [])


def run_mcp(
    env: dict[str, str],
    args: list[str],
    script: Callable[[ClientSession], Awaitable[Any]],
    notifications: list[Any] | None = None,
) -> Any:
    """Run `script(session)` inside one initialized MCP session with `sandboxctl ARGS` (stdio);
    the server's notifications are appended to `notifications` when given."""
    params = StdioServerParameters(command=SANDBOXCTL, env=env, args=args)

    async def record(message: Any) -> None:
        if notifications is not None and not isinstance(message, Exception):
            notifications.append(message)

    async def main() -> Any:
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, message_handler=record) as session,
        ):
            await session.initialize()
            return await script(session)

    return anyio.run(main)


def text_of(result: Any) -> str:
    """The text blocks of a tool result, joined."""
    return "".join(block.text for block in result.content if block.type == "text")


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk, which must follow the signature with a valid CRC."""
    assert data[:8] == PNG_SIGNATURE, data[:8]
    length, kind = struct.unpack(">I4s", data[8:16])
    assert (length, kind) == (13, b"IHDR")
    (crc,) = struct.unpack(">I", data[29:33])
    assert zlib.crc32(data[12:29]) == crc, "IHDR CRC mismatch"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def image_bytes(block: Any) -> bytes:
    """The bytes of an MCP ImageContent block."""
    assert block.type == "image"
    return base64.b64decode(block.data, validate=True)
