"""Every table of the stage on the reset moto server (tests/support/tables.py), and acme's local
interpreter for the job flow tests (tests/support/runner.py)."""

from __future__ import annotations

from tests.support.runner import acme_interpreter
from tests.support.tables import STAGE, ddb, tables

__all__ = ["STAGE", "acme_interpreter", "ddb", "tables"]
