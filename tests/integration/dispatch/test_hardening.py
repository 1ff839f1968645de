"""The last lows of the red-team pass, through dispatch on the shared real-parts stack (moto, the
local interpreter under bubblewrap, the quota Lambda in the emulator): each reproduced as it was
found, then what holds now."""

from __future__ import annotations

import pytest

from .conftest import Stack, event

# The session's code writes a frame of its own to the worker's answer channel: 60,000 nested
# brackets, which no JSON parser takes (RecursionError).
_NESTED_FRAME = (
    "import os, struct, sys\n"
    "fd = int(sys.argv[sys.argv.index('--resp-fd') + 1])\n"
    "payload = b'[' * 60000\n"
    "os.write(fd, struct.pack('>II', len(payload), 0) + payload)\n"
    "print('stored')\n"
)


def test_hardening_unparseable_frame_ends_the_session_and_no_later_call_answers_an_earlier_result(
    stack: Stack,
) -> None:
    # Given a turn with a live session
    first = stack.dispatch(event(call_id="f1", code="print('first')"))
    assert first["stdout"] == "first\n"
    # When its code writes a frame the interpreter cannot parse
    attack = stack.dispatch(event(call_id="f2", code=_NESTED_FRAME))
    # Then that call fails as a protocol error, and the session is ended
    assert (attack["ok"], attack["error"]) == (False, "SandboxError"), attack
    assert "protocol" in attack["stderr"]
    assert first["session_id"] not in stack.live_sessions()
    # And each later call of the turn answers its own output, in a fresh session
    for n_call in range(3, 6):
        later = stack.dispatch(event(call_id=f"f{n_call}", code=f"print('call {n_call}')"))
        assert (later["ok"], later["stdout"]) == (True, f"call {n_call}\n"), later
        assert later["session_id"] != first["session_id"]


_FORK_BOMB = ":(){ :|:& };:"
_COUNT_PROCESSES = "import os\nprint(sum(1 for p in os.listdir('/proc') if p.isdigit()))"


def test_hardening_fork_bomb_in_a_command_is_cleaned_up_when_its_call_ends(stack: Stack) -> None:
    # Given a turn with a live session and the processes it runs at rest
    at_rest = stack.dispatch(event(call_id="b0", code=_COUNT_PROCESSES))
    assert at_rest["ok"] is True, at_rest
    # When a command of the turn is a fork bomb (bounded by the session's task limit)
    bomb = stack.dispatch(event(call_id="b1", code=_FORK_BOMB, language="bash"))
    assert bomb["session_id"] == at_rest["session_id"]
    # Then the next calls of the turn run normally in the same session, a command included, and
    # nothing of the bomb is left
    after = stack.dispatch(event(call_id="b2", code="echo still here", language="bash"))
    assert (after["ok"], after["stdout"], after["session_id"]) == (
        True,
        "still here\n",
        at_rest["session_id"],
    )
    counted = stack.dispatch(event(call_id="b3", code=_COUNT_PROCESSES))
    assert int(counted["stdout"]) <= int(at_rest["stdout"]), (at_rest["stdout"], counted["stdout"])


def test_hardening_a_commands_leftover_processes_end_with_it_but_not_earlier_ones(stack: Stack) -> None:
    # Given a process an earlier Python call of the turn started and keeps
    kept = stack.dispatch(
        event(call_id="k0", code="import subprocess\nserver = subprocess.Popen(['sleep', '300'])")
    )
    assert kept["ok"] is True, kept
    # When a command leaves processes of its own behind, one of them in a new session (setsid)
    left = stack.dispatch(
        event(call_id="k1", code="sleep 300 &\nsetsid sleep 301 &\necho started", language="bash")
    )
    assert left["stdout"] == "started\n"
    # Then the command's processes ended with its call, and the earlier call's one still runs
    survivors = stack.dispatch(
        event(
            call_id="k2",
            code=(
                "import os\nnames = []\nfor p in os.listdir('/proc'):\n"
                "    try:\n        names.append(open(f'/proc/{p}/cmdline', 'rb').read())\n"
                "    except OSError:\n        pass\n"
                "print(sorted(n.replace(b'\\0', b' ').decode().strip() for n in names if b'sleep' in n))\n"
                "print(server.poll())"
            ),
        )
    )
    assert survivors["stdout"] == "['sleep 300']\nNone\n", survivors


def test_hardening_tenant_disable_seen_as_a_refusal_is_not_undone_by_a_container_with_an_older_cache(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dispatch import parts as dependencies

    from tests.support.stack import kill

    # Given dispatch container B, whose pre-flight cache says acme is enabled
    assert stack.dispatch(event(call_id="d0", code="x = 1"))["ok"] is True
    stale = dependencies.built()
    counted = _daily_count(stack)
    # When the operator disables acme and a fresh container A refuses acme's next call
    kill(stack, "tenant_disabled")
    dependencies.reset()
    refused = stack.dispatch(event(call_id="d1"))
    assert (refused["error"], refused["reason"]) == ("SandboxProvisioning", "tenant_disabled"), refused

    # Then container B, whose cache is older, refuses acme's later calls too, counting nothing
    def container_b() -> dependencies.Parts:
        return stale

    container_b.cache_clear = lambda: None  # type: ignore[attr-defined]  # parts.reset() calls it
    monkeypatch.setattr(dependencies, "built", container_b)
    for call_id in ("d2", "d3"):
        again = stack.dispatch(event(call_id=call_id))
        assert (again["ok"], again["error"], again["reason"]) == (
            False,
            "SandboxProvisioning",
            "tenant_disabled",
        )
    assert _daily_count(stack) == counted
    rows = {r["call_id"]: r for r in stack.audit_rows("acme")}
    assert rows["d2"]["exit_status"] == rows["d3"]["exit_status"] == "provisioning"


def _daily_count(stack: Stack) -> int:
    from sandbox_common import naming as n

    items = stack.counter_items()[n.TENANT_DAILY_COUNTERS.logical]
    return sum(int(i[n.COUNTER_ATTR_COUNT]["N"]) for i in items)
