"""Every table of a stage on the test's (reset) moto server, created from the naming specs
(`tables`, with each table's TTL), and the DynamoDB client that reaches them (`ddb`).
Import both fixtures into a conftest."""

from __future__ import annotations

from typing import Any

import pytest
from sandbox_common import aws
from sandbox_common import naming as n

from infra.local.resources import create_table_request, ttl_request

STAGE = "test"


@pytest.fixture
def tables(moto_endpoint: str) -> dict[str, str]:
    """Logical table name -> physical name, every table created."""
    ddb = aws.client("dynamodb")
    for spec in n.ALL_TABLES:
        ddb.create_table(**create_table_request(spec, STAGE))
        ttl = ttl_request(spec, STAGE)
        if ttl:
            ddb.update_time_to_live(**ttl)
    return {spec.logical: spec.physical(STAGE) for spec in n.ALL_TABLES}


@pytest.fixture
def ddb(tables: dict[str, str]) -> Any:
    return aws.client("dynamodb")
