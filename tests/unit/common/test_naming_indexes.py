"""Index names the CLI queries are the table declarations' own: each index declared once, the table
lists it."""

from __future__ import annotations

from sandbox_common import naming as n


def test_invocation_indexes_are_the_declared_ones() -> None:
    # Given the audit table's declaration / When the CLI's index names are read
    declared = {index.name: index for index in n.INVOCATIONS.indexes}
    # Then they are the declared indexes, keys included
    assert n.INVOCATIONS_BY_SESSION is declared["by_session"]
    assert n.INVOCATIONS_BY_TENANT_TIME is declared["by_tenant_time"]
    assert (n.INVOCATIONS_BY_SESSION.pk, n.INVOCATIONS_BY_SESSION.sk) == ("session_id", "started_at")
