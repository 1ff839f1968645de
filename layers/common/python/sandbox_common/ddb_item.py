"""One DynamoDB item in its wire form (`{"S": "…"}`, `{"N": "…"}`), as the low-level client
returns it: typed attribute readers, for a store's `from_item`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def readers(item: dict[str, Any]) -> tuple[Callable[[str], str | None], Callable[[str], int | None]]:
    """(s, i) for one item: `s(name)` the attribute's string, `i(name)` its number as an int; None
    when the attribute is absent or of another type."""

    def s(name: str) -> str | None:
        return item[name]["S"] if name in item and "S" in item[name] else None

    def i(name: str) -> int | None:
        return int(item[name]["N"]) if name in item and "N" in item[name] else None

    return s, i
