"""Thin handler: Powertools context logging, settings, one logic call, a summary back."""

from __future__ import annotations

from typing import Any

from sandbox_common.observability import logger
from sandbox_common.settings import backstop_settings

from backstop.scanner import process_subscription_event


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    settings = backstop_settings()
    result = process_subscription_event(event, findings_table=settings.findings_table)
    return result.summary()
