"""A real MemoryError traceback from a real Python process, through the unmodified boto3 client and
real event-stream frames: `oom` only when the MemoryError is the last exception raised."""

from __future__ import annotations

SESSION = "sess0001"


def test_execute_memory_error_traceback_is_oom(fake_agentcore, make_runner):
    # Given a real MemoryError traceback from a real Python process (the default double runs code)
    code = "raise ValueError('first')"
    code = "try:\n    raise ValueError('first')\nexcept ValueError:\n    raise MemoryError()\n"
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, code)
    # Then
    assert result.exit_code == 1
    assert result.stderr.rstrip().endswith("MemoryError")
    assert (result.exit_status, result.error, result.failure_reason) == ("oom", "SandboxOOM", "memory_error")


def test_execute_memory_error_not_last_is_plain_error(fake_agentcore, make_runner):
    # Given a MemoryError that was handled, then another exception ended the run
    code = "try:\n    raise MemoryError()\nexcept MemoryError:\n    raise KeyError('k')\n"
    # When
    result = make_runner().execute(fake_agentcore.INTERPRETER, SESSION, code)
    # Then
    assert "MemoryError" in result.stderr
    assert result.exit_status == "error"
