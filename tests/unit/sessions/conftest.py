from __future__ import annotations

from typing import Any

import pytest
from sandbox_common import aws
from sandbox_common import naming as n

STAGE = "test"


@pytest.fixture
def tables(moto_endpoint: str) -> dict[str, str]:
    """Every table of the stage on the (reset) moto server, created from the naming specs."""
    ddb = aws.client("dynamodb")
    for spec in n.ALL_TABLES:
        ddb.create_table(**n.create_table_request(spec, STAGE))
    return {spec.logical: spec.physical(STAGE) for spec in n.ALL_TABLES}


@pytest.fixture
def ddb(tables: dict[str, str]) -> Any:
    return aws.client("dynamodb")
