"""What every store over one DynamoDB table holds: the table's name, the low-level client, and the
clock and sleep its conditional writes and retries go by (a test passes its own)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class TableStore:
    def __init__(
        self,
        *,
        table_name: str,
        ddb: Any,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.table = table_name
        self.ddb = ddb
        self.clock = clock
        self.sleep = sleep
