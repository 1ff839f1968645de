"""The session runtime (sandbox_session) as shipped: the text the shipping code sends into a
session is the package's source byte for byte. That text running in an interpreter with nothing
but the standard library: tests/integration/session_runtime/test_as_shipped.py."""

from __future__ import annotations

from pathlib import Path

from sandbox_common.redaction.stdio import preamble_source
from sandbox_common.tools_protocol import installer_source
from sandbox_runtime.runner import cells, commands, job_snippets, programs
from sandbox_session import cell, jobs, node, redactor, shell, tools


def test_session_runtime_shipped_text_is_the_package_source() -> None:
    # Given the package's three modules, read as text
    def source(module: object) -> str:
        return Path(str(getattr(module, "__file__", ""))).read_text(encoding="utf-8")

    # When the shipping code builds what it sends into a session
    preamble, installer, job_files = preamble_source(), installer_source(), job_snippets.runtime_sources()
    # Then each carries its module's source byte for byte
    assert repr(source(redactor)) in preamble
    assert repr(source(tools)) in installer
    assert job_files[jobs.RUNTIME_FILE] == source(jobs)
    assert job_files[jobs.STDIO_RUNTIME_FILE] == source(redactor)
    assert job_files[jobs.SHELL_RUNTIME_FILE] == source(shell)
    assert repr(source(shell)) in commands.command_source("true", 1.0)
    assert repr(source(cell)) in cells.cell_source("pass", 1.0)
    assert job_files[jobs.NODE_RUNTIME_FILE] == source(node)
    program = programs.program_source("console.log(1)", "javascript", 1.0)
    assert repr(source(node)) in program and repr(source(shell)) in program
