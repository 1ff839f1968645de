"""DynamoDB items as `sandboxctl` shows and writes them: plain JSON-friendly values, every page of
a Query or Scan; an error's code, an SSM parameter's value if it exists, and the times an operator
types."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from infra.sandboxctl.target import Target


def plain(value: Any) -> Any:
    """DynamoDB values as JSON-friendly Python (Decimal -> int/float, sets -> sorted lists)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(plain(v) for v in value)
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    return value


def deserialize(item: dict[str, Any]) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeDeserializer

    deser = TypeDeserializer()
    return {k: plain(deser.deserialize(v)) for k, v in item.items()}


def paged_items(target: Target, operation: str, **request: Any) -> Iterator[dict[str, Any]]:
    """Deserialized items of a DynamoDB Query or Scan across all its pages (botocore's
    paginator, read lazily: a caller that stops early fetches no further page)."""
    for page in target.client("dynamodb").get_paginator(operation).paginate(**request):
        for raw in page.get("Items", []):
            yield deserialize(raw)


def serialize(item: dict[str, Any]) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeSerializer

    ser = TypeSerializer()
    return {k: ser.serialize(_to_dynamo(v)) for k, v in item.items()}


def _to_dynamo(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, dict):
        return {k: _to_dynamo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_dynamo(v) for v in value]
    return value


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def parse_time(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parameter_value(ssm: Any, name: str) -> str | None:
    """The SSM parameter's value, or None when there is no such parameter."""
    try:
        value = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except ClientError as exc:
        if error_code(exc) != "ParameterNotFound":
            raise
        return None
    return str(value)
