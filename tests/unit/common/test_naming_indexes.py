"""Index names the CLI queries come from the table declarations (one home per name)."""

from __future__ import annotations

import pytest
from sandbox_common import naming as n


def test_invocation_indexes_are_the_declared_ones() -> None:
    # Given the audit table's declaration / When the CLI's index names are read
    declared = {index.name: index for index in n.INVOCATIONS.indexes}
    # Then they are the declared indexes, keys included
    assert n.INVOCATIONS_BY_SESSION is declared["by_session"]
    assert n.INVOCATIONS_BY_TENANT_TIME is declared["by_tenant_time"]
    assert (n.INVOCATIONS_BY_SESSION.pk, n.INVOCATIONS_BY_SESSION.sk) == ("session_id", "started_at")


def test_declared_index_refuses_a_name_the_table_does_not_declare() -> None:
    # Given a misspelt index name / When looked up / Then it fails at once, not at query time
    with pytest.raises(ValueError, match="by_sesion"):
        n._declared_index(n.INVOCATIONS, "by_sesion")  # noqa: SLF001 — the guard itself is under test
