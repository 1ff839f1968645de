"""The agent client of the execute_code sandbox (`pip install ./layers/client`): one turn's
actions against the dispatch Lambda with typed results, background jobs, and with the extras
Strands tools (`[strands]`) and an MCP server (`[mcp]`). Its only runtime dependency is boto3."""

from .errors import ArtifactMismatch, ArtifactUnavailable, DispatchUnavailable, ToolUnavailable
from .results import Artifact, ExecutionResult, JobResult
from .turn import SandboxTurn

__all__ = [
    "Artifact",
    "ArtifactMismatch",
    "ArtifactUnavailable",
    "DispatchUnavailable",
    "ExecutionResult",
    "JobResult",
    "SandboxTurn",
    "ToolUnavailable",
]
