"""Output: JSON on stdout with --json, otherwise small aligned tables for humans."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, default=str)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    if not rows:
        return "(none)"
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def pairs(data: dict[str, Any]) -> str:
    width = max((len(k) for k in data), default=0)
    return "\n".join(f"{k.ljust(width)}  {_cell(v)}" for k, v in data.items())


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)
