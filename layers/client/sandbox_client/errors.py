"""The client's own failures (raised, never answered: a named sandbox error is an answer)."""

from __future__ import annotations

from .contract import INVALID_REQUEST


class DispatchUnavailable(RuntimeError):
    """The dispatch Lambda itself could not be invoked or crashed (not a named sandbox error)."""


class ArtifactUnavailable(RuntimeError):
    """get_file refused (unknown file_id, or another tenant's); `error` names the class."""

    def __init__(self, message: str, error: str = INVALID_REQUEST) -> None:
        super().__init__(message)
        self.error = error


class ArtifactMismatch(RuntimeError):
    """The downloaded bytes do not hash to the artifact's sha256."""


class ToolUnavailable(RuntimeError):
    """This turn has no execute_code tool to serve: begin_turn was not called yet, or it answered
    without one (the tenant or template has no sandbox); the message says which."""
