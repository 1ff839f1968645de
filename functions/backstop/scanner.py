"""Decode a CloudWatch Logs subscription payload, re-scan every event, build findings.

Never stores or logs a token: a finding carries the class, where it was (log group, stream,
event id, timestamp) and the first 12 hex chars of the token's SHA-256.
"""

from __future__ import annotations

import binascii
import json
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aws_lambda_powertools.utilities.data_classes import CloudWatchLogsEvent
from sandbox_common import limits, naming
from sandbox_common.observability import emit_metric, logger
from sandbox_common.redaction.findings import fingerprint, scan

from backstop import findings_store

# Correlation ids copied from a structured (JSON) log line into the finding, when well formed.
_CORRELATION_KEYS = ("tenant_id", "session_id")
_DECODER = json.JSONDecoder()


@dataclass
class ScanResult:
    log_group: str = ""
    events: int = 0
    findings: list[dict[str, Any]] = field(default_factory=list)
    decode_errors: int = 0
    control_message: bool = False

    def summary(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "findings": len(self.findings),
            "decode_errors": self.decode_errors,
            "control_message": self.control_message,
        }


class DecodeError(Exception):
    """The subscription payload is not base64(gzip(JSON))."""


def decode(event: dict[str, Any]) -> Any:
    """The decoded payload (Powertools data class), or DecodeError — never a partial result."""
    try:
        decoded = CloudWatchLogsEvent(event).parse_logs_data()
        # Touch every field scan_events relies on, so a malformed document fails here, whole.
        if not isinstance(decoded.message_type, str) or not isinstance(
            decoded.raw_event.get("logEvents"), list
        ):
            raise ValueError("not a subscription payload")
        decoded.log_group  # noqa: B018
        decoded.log_stream  # noqa: B018
        return decoded
    except (binascii.Error, zlib.error, OSError, EOFError, ValueError, KeyError, TypeError) as exc:
        raise DecodeError(type(exc).__name__) from None


def scan_events(decoded: Any, *, now: datetime | None = None) -> ScanResult:
    """Findings for every token in every event of one decoded payload (no I/O)."""
    result = ScanResult(log_group=str(decoded.log_group or ""))
    if decoded.message_type == "CONTROL_MESSAGE":
        result.control_message = True
        return result
    raw_events = decoded.raw_event.get("logEvents") or []
    log_stream = str(decoded.log_stream or "")
    for raw in raw_events:
        result.events += 1
        message = raw.get("message") if isinstance(raw, dict) else None
        if not isinstance(message, str):
            result.decode_errors += 1
            continue
        hits = scan(message)
        if not hits:
            continue
        event_id = str(raw.get("id", ""))
        try:
            moment = datetime.fromtimestamp(int(raw.get("timestamp")) / 1000, UTC)
        except (TypeError, ValueError, OverflowError, OSError):
            moment = now or datetime.now(UTC)
        correlation = _correlation(message)
        iso = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
        for n, hit in enumerate(hits):
            finding = {
                naming.FINDINGS.pk: moment.strftime("%Y-%m-%d"),
                naming.FINDINGS.sort_key: f"{iso}#{event_id}#{n}",
                "log_group": result.log_group,
                "log_stream": log_stream,
                "event_id": event_id,
                "timestamp": iso,
                "token_class": hit.token_class,
                "fingerprint": fingerprint(message[hit.start : hit.end]),
                naming.FINDINGS.ttl: int(
                    (moment + timedelta(days=limits.FINDINGS_RETENTION_DAYS)).timestamp()
                ),
            }
            finding.update(correlation)
            result.findings.append(finding)
    return result


def _correlation(message: str) -> dict[str, str]:
    start = message.find("{")
    if start < 0:
        return {}
    try:
        # raw_decode: a JSON object followed by more text (e.g. a Lambda log line) still parses.
        payload, _ = _DECODER.raw_decode(message, start)
    except ValueError:
        return {}
    if not isinstance(payload, dict):
        return {}
    found = {}
    for key in _CORRELATION_KEYS:
        value = payload.get(key)
        # Only well-formed ids: a hostile value never reaches the table or a log line.
        if isinstance(value, str) and naming.REQUEST_ID_RE.match(value):
            found[key] = value
    return found


def process_subscription_event(event: dict[str, Any], *, findings_table: str) -> ScanResult:
    """Decode, scan, store findings, emit metrics. Undecodable payloads are counted and dropped
    (CloudWatch Logs would redeliver a poison record forever otherwise)."""
    try:
        decoded = decode(event)
    except DecodeError as exc:
        emit_metric(naming.METRIC_BACKSTOP_DECODE_ERRORS, 1)
        logger.error("backstop payload could not be decoded", extra={"error_type": str(exc)})
        return ScanResult(decode_errors=1)
    result = scan_events(decoded)
    if result.decode_errors:
        emit_metric(naming.METRIC_BACKSTOP_DECODE_ERRORS, result.decode_errors)
        logger.error("backstop skipped malformed log events", extra={"skipped": result.decode_errors})
    if result.findings:
        findings_store.put_findings(findings_table, result.findings)
        per_class: dict[str, int] = {}
        for finding in result.findings:
            per_class[finding["token_class"]] = per_class.get(finding["token_class"], 0) + 1
        for token_class, count in sorted(per_class.items()):
            emit_metric(naming.METRIC_TOKEN_DETECTED, count, dimensions={"token_class": token_class})
        logger.warning(
            "token-shaped strings detected",
            extra={"log_group": result.log_group, "findings": len(result.findings), "classes": per_class},
        )
    return result
