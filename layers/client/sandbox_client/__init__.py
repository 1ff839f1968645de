"""The agent client of the execute_code sandbox (`pip install ./layers/client`): one turn's
actions against the dispatch Lambda with typed results, background jobs, and with the extras
Strands tools (`[strands]`) and an MCP server (`[mcp]`). Its only runtime dependency is boto3.

Code that ran answers an `ExecutionResult` (`ok` false with a structured `error` when it failed);
a call dispatch refused raises a `SandboxRefused` subclass."""

from .errors import (
    ArtifactMismatch,
    ArtifactUnavailable,
    DispatchUnavailable,
    SandboxCapExceeded,
    SandboxInvalidRequest,
    SandboxProvisioning,
    SandboxRefused,
    ToolUnavailable,
    TurnTokenMismatch,
)
from .results import Artifact, ExecutionError, ExecutionResult, JobResult
from .turn import SandboxTurn

__all__ = [
    "Artifact",
    "ArtifactMismatch",
    "ArtifactUnavailable",
    "DispatchUnavailable",
    "ExecutionError",
    "ExecutionResult",
    "JobResult",
    "SandboxCapExceeded",
    "SandboxInvalidRequest",
    "SandboxProvisioning",
    "SandboxRefused",
    "SandboxTurn",
    "ToolUnavailable",
    "TurnTokenMismatch",
]
