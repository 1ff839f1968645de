"""The agent client in a fresh interpreter: it imports without pydantic, Powertools or the common
layer, and its Strands tool says how to install strands-agents when that package is missing."""

from __future__ import annotations


def test_strands_tool_without_strands_says_how_to_install() -> None:
    # Given an agent runtime without strands-agents (blocked in a fresh interpreter)
    import subprocess
    import sys

    code = (
        "import sys\n"
        "sys.modules['strands'] = None\n"
        "from sandbox_client.turn import SandboxTurn\n"
        "try:\n"
        "    SandboxTurn('fn', tenant_id='acme', agent_id='a', template_id='t').strands_tool()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    # When it asks for the Strands tool / Then the ImportError says what to install
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "pip install strands-agents" in out.stdout


def test_agent_client_imports_without_pydantic_powertools_or_the_common_layer() -> None:
    # Given an agent runtime that has boto3 but neither pydantic, Powertools nor sandbox_common
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for blocked in ('pydantic', 'aws_lambda_powertools', 'sandbox_common'):\n"
        "    sys.modules[blocked] = None  # any import of it now fails\n"
        "from sandbox_client.turn import SandboxTurn\n"
        "turn = SandboxTurn('fn', tenant_id='acme', agent_id='a', template_id='t')\n"
        "print(turn.turn_id.startswith('turn-'))\n"
    )
    # When it imports the client / Then it works
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
