"""Every table of the stage on the reset moto server (tests/support/tables.py)."""

from __future__ import annotations

from tests.support.tables import STAGE, ddb, tables

__all__ = ["STAGE", "ddb", "tables"]
