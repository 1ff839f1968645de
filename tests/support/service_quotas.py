"""A stand-in Service Quotas endpoint: moto implements Service Quotas for the `vpc` service only
(`moto/servicequotas/models.py`), and `sandboxctl doctor` reads IAM, Lambda and AgentCore quotas.

It speaks the real wire protocol (awsJson1_1, `X-Amz-Target: ServiceQuotasV20190624.<Operation>`),
so the unmodified boto3 client reaches it through `AWS_ENDPOINT_URL_SERVICE_QUOTAS`, serializes
and parses as it does against AWS: `GetServiceQuota` answers a quota set for the request's region,
`ListServiceQuotas` every quota of a service there, and anything unknown
`NoSuchResourceException`, as Service Quotas does. Region comes from the request's SigV4 scope.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_TARGET = "ServiceQuotasV20190624."
_REGION_RE = re.compile(r"Credential=[^/]+/\d{8}/([a-z0-9-]+)/servicequotas/")


@dataclass(frozen=True)
class Quota:
    service: str
    code: str
    name: str
    value: float
    region: str  # where it is read ("us-east-1" for IAM's global quotas)


@dataclass
class ServiceQuotasStub:
    quotas: list[Quota] = field(default_factory=list)
    requests: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # (op, region, body)

    def set(self, service: str, code: str, name: str, value: float, region: str) -> None:
        self.quotas = [q for q in self.quotas if not (q.service, q.code, q.region) == (service, code, region)]
        self.quotas.append(Quota(service, code, name, value, region))

    def answer(self, operation: str, region: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.requests.append((operation, region, body))
        here = [q for q in self.quotas if q.region == region and q.service == body.get("ServiceCode")]
        if operation == "GetServiceQuota":
            found = [q for q in here if q.code == body.get("QuotaCode")]
            if not found:
                return 400, {
                    "__type": "NoSuchResourceException",
                    "message": "The request failed because the specified resource does not exist.",
                }
            return 200, {"Quota": _shape(found[0])}
        if operation == "ListServiceQuotas":
            if not here:
                return 400, {
                    "__type": "NoSuchResourceException",
                    "message": "The request failed because the specified service does not exist.",
                }
            return 200, {"Quotas": [_shape(q) for q in here]}
        return 400, {"__type": "UnknownOperationException", "message": operation}


def _shape(q: Quota) -> dict[str, Any]:
    return {
        "ServiceCode": q.service,
        "ServiceName": q.service,
        "QuotaArn": f"arn:aws:servicequotas:{q.region}:123456789012:{q.service}/{q.code}",
        "QuotaCode": q.code,
        "QuotaName": q.name,
        "Value": q.value,
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": q.region == "us-east-1" and q.service == "iam",
    }


@contextmanager
def serving(stub: ServiceQuotasStub) -> Iterator[str]:
    """The stub on a loopback port for the block; yields its endpoint URL."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            operation = self.headers.get("X-Amz-Target", "").removeprefix(_TARGET)
            match = _REGION_RE.search(self.headers.get("Authorization", ""))
            status, answer = stub.answer(operation, match.group(1) if match else "", body)
            raw = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-amz-json-1.1")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
