"""The agent client of the execute_code sandbox (`pip install ./layers/client`): one turn's
actions against the dispatch Lambda, background jobs, and with the extras a Strands tool
(`[strands]`) and an MCP server (`[mcp]`). Its only runtime dependency is boto3."""

from .turn import ArtifactMismatch, ArtifactUnavailable, DispatchUnavailable, SandboxTurn, ToolUnavailable

__all__ = ["ArtifactMismatch", "ArtifactUnavailable", "DispatchUnavailable", "SandboxTurn", "ToolUnavailable"]
