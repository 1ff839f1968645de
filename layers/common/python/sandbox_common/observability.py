"""The one place that creates the Powertools Logger and emits metrics.

Metrics go out as EMF through `single_metric`, one metric with exactly the dimensions given, so
that alarms (built from the same names in infra/) match them exactly: no implicit `service`
dimension sneaks in. Namespace comes from POWERTOOLS_METRICS_NAMESPACE (set by CDK), falling
back to naming.METRICS_NAMESPACE.
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from .naming import METRICS_NAMESPACE

logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "sandbox"))


def emit_metric(
    name: str,
    value: float = 1,
    *,
    dimensions: dict[str, str] | None = None,
    unit: MetricUnit = MetricUnit.Count,
    properties: dict[str, Any] | None = None,
) -> None:
    namespace = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", METRICS_NAMESPACE)
    with single_metric(name=name, unit=unit, value=value, namespace=namespace) as metric:
        # single_metric adds a `service` dimension from POWERTOOLS_SERVICE_NAME (set in Lambda),
        # which alarms built from METRIC_DIMENSIONS would never match: emit exactly `dimensions`.
        metric.service = None  # type: ignore[assignment]  # the provider reads None as "no service"
        for key, dim_value in (dimensions or {}).items():
            metric.add_dimension(name=key, value=str(dim_value))
        for key, prop in (properties or {}).items():
            metric.add_metadata(key=key, value=prop)
