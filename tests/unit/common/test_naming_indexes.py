"""Index names the CLI queries are the table declarations' own: each index declared once, the table
lists it; every table key is built by its declaration."""

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


def test_table_key_is_the_wire_form_of_the_tables_own_key_attributes() -> None:
    # Given a table with a sort key (turns) and one without (jobs)
    # When their keys are built
    turn = n.TURNS.key("acme", "t-1")
    job = n.JOBS.key("job#j-1")
    # Then each names the table's own key attributes, as DynamoDB string values
    assert turn == {n.TURNS.pk: {"S": "acme"}, n.TURNS.sort_key: {"S": "t-1"}}
    assert job == {n.JOBS.pk: {"S": "job#j-1"}}


def test_table_key_without_the_sort_key_value_it_needs_is_refused() -> None:
    # Given the wrong number of key values for each table
    # When / Then the key is refused, naming the table
    with pytest.raises(ValueError, match=n.TURNS.logical):
        n.TURNS.key("acme")
    with pytest.raises(ValueError, match=n.JOBS.logical):
        n.JOBS.key("job#j-1", "extra")
