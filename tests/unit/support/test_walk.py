"""The walk's reading by package (tests/support/walk.py)."""

from __future__ import annotations

from tests.support.walk import Walk


def test_walk_by_package_reads_each_module_as_its_package() -> None:
    # Given a walk through two modules of one package, the runner's modules and back to the hub
    walk = Walk(
        stops=[
            "dispatch.handler",
            "dispatch.steps",
            "dispatch.sessions.flow",
            "dispatch.sessions.lease",
            "dispatch.steps",
            "sandbox_runtime.runner.session",
            "sandbox_runtime.runner.stream",
            "dispatch.steps",
        ]
    )
    # When it is read by package
    packages = walk.by_package()
    # Then a move inside one package is no stop, and a package left and entered again is a return
    assert packages.stops == [
        "dispatch.handler",
        "dispatch.steps",
        "dispatch.sessions",
        "dispatch.steps",
        "sandbox_runtime.runner",
        "dispatch.steps",
    ]
    assert packages.figure()["returns"] == 2 and walk.figure()["returns"] == 2
    assert packages.figure()["stops"] == 6 and walk.figure()["stops"] == 8
