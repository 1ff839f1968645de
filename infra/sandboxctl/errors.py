"""sandboxctl's exit codes and its one operator-facing error (imported by every command module,
so none of them needs main.py: main imports the commands, never the other way round)."""

from __future__ import annotations

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class CtlError(Exception):
    """A failure the operator can act on: printed as one line, exit code 1."""
