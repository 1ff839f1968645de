"""A local Lambda `Invoke` endpoint, so the unmodified boto3 lambda client works against it
(AWS_ENDPOINT_URL_LAMBDA): dispatch calls the quota function through it, `sandboxctl invoke`
calls dispatch through it.

Speaks the REST shape of `POST /2015-03-31/functions/{FunctionName}/invocations`:
RequestResponse (200 + payload), `X-Amz-Function-Error: Unhandled` + the runtime's error JSON on
an unhandled exception, Event (202) and DryRun (204); unknown function -> 404
ResourceNotFoundException; non-JSON payload -> 400 InvalidRequestContentException.

Qualifiers as Lambda has them: a FunctionName may be a name, a full or partial ARN, each
optionally ending in `:<qualifier>`, or the qualifier comes as the `Qualifier` query parameter. A
function's aliases (the ones its spec declares; each points to `$LATEST`, there are no published
versions locally) and `$LATEST` resolve; any other qualifier is 404 ResourceNotFoundException
naming the qualified ARN, as Lambda answers. The handler's `context.invoked_function_arn` is the
ARN the caller invoked, qualifier included (the Python runtime's context: "indicates if the invoker
specified a version number or alias"), and `X-Amz-Executed-Version` the version that ran.

Each function has a pool of warm worker subprocesses (`lambda_worker.py`), spawned on demand up
to `max_concurrency`, so concurrent invocations really run concurrently and module-level caches
behave as in Lambda containers. Every worker starts with exactly the environment in the
emulator's config (built by the local stack from `infra.cdk.function_env.function_environment`, the
function the CDK stack uses) plus the variables the Lambda runtime itself sets.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

from infra.local.lambda_workers import FunctionSpec, Worker, WorkerGone

MAX_PAYLOAD_BYTES = 6 * 1024 * 1024  # Lambda's synchronous payload limit
HEALTH_PATH = "/local/health"
_INVOKE_PREFIX = "/2015-03-31/functions/"
_INVOKE_SUFFIX = "/invocations"
# How often serve_forever checks for shutdown: stop() waits up to one interval (the stdlib's 0.5 s
# default made every stop of a test's emulator cost half a second).
_SHUTDOWN_POLL_SECONDS = 0.02


@dataclass
class FunctionPool:
    spec: FunctionSpec
    region: str
    account: str
    _idle: list[Worker] = field(default_factory=list)
    _live: int = 0
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _closed: bool = False

    @property
    def arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{self.account}:function:{self.spec.name}"

    def _acquire(self) -> Worker:
        with self._cond:
            while True:
                # An idle worker that died meanwhile (killed from outside) is dropped, not reused.
                while self._idle and not self._idle[-1].alive():
                    self._idle.pop().kill()
                    self._live -= 1
                if self._idle or self._live < self.spec.max_concurrency:
                    break
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._live += 1
        try:
            return Worker(self.spec, self.region, self.account)
        except Exception:
            with self._cond:
                self._live -= 1
                self._cond.notify()
            raise

    def _release(self, worker: Worker, reusable: bool) -> None:
        with self._cond:
            if reusable and not self._closed:
                self._idle.append(worker)
            else:
                self._live -= 1
                worker.kill()
            self._cond.notify()

    def qualified_arn(self, qualifier: str | None) -> str:
        return f"{self.arn}:{qualifier}" if qualifier else self.arn

    def serves(self, qualifier: str | None) -> bool:
        """An unqualified call, `$LATEST` or one of the function's aliases."""
        return qualifier in (None, LATEST) or qualifier in self.spec.aliases

    def invoke(self, payload: str, request_id: str, qualifier: str | None = None) -> tuple[bool, str]:
        """(True, result JSON) or (False, runtime error JSON)."""
        deadline = time.time() + self.spec.timeout_seconds
        request = {
            "request_id": request_id,
            "payload": payload,
            "function_name": self.spec.name,
            "invoked_function_arn": self.qualified_arn(qualifier),
            "memory_limit_in_mb": self.spec.memory_mb,
            "log_group_name": f"/aws/lambda/{self.spec.name}",
            "log_stream_name": "",
            "deadline_ms": int(deadline * 1000),
        }
        try:
            worker = self._acquire()
        except WorkerGone as exc:
            return False, json.dumps({"errorMessage": str(exc), "errorType": "Runtime.Unknown"})
        request["log_stream_name"] = worker.stream
        try:
            response = worker.call(request, timeout=self.spec.timeout_seconds + 1)
        except WorkerGone as exc:
            self._release(worker, reusable=False)
            if str(exc) == "timeout":
                message = f"{request_id} Task timed out after {self.spec.timeout_seconds:.2f} seconds"
                return False, json.dumps({"errorMessage": message, "errorType": "Sandbox.Timedout"})
            return False, json.dumps(
                {
                    "errorMessage": f"RequestId: {request_id} Error: Runtime exited",
                    "errorType": "Runtime.ExitError",
                }
            )
        self._release(worker, reusable=True)
        if response.get("ok"):
            return True, response["payload"]
        return False, json.dumps(response["error"])

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()


LATEST = "$LATEST"


def split_function_name(name: str) -> tuple[str, str | None]:
    """(function name, qualifier or None) of an Invoke FunctionName: `name`, `name:qualifier`,
    `arn:aws:lambda:region:account:function:name[:qualifier]` or
    `account:function:name[:qualifier]`."""
    if ":function:" in name:
        name = name.split(":function:", 1)[1]
    function, _, qualifier = name.partition(":")
    return function, qualifier or None


@dataclass(frozen=True)
class Schedule:
    """An EventBridge `rate(...)` rule targeting a function (e.g. the session reaper's)."""

    function: str  # physical function name
    rate_seconds: float

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Schedule:
        return cls(**data)


def scheduled_event(region: str, account: str, rule: str) -> dict[str, Any]:
    """The payload EventBridge sends a Lambda target of a scheduled rule."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "region": region,
        "resources": [f"arn:aws:events:{region}:{account}:rule/{rule}"],
        "detail": {},
    }


class LambdaEmulator:
    def __init__(
        self,
        functions: list[FunctionSpec],
        *,
        port: int = 0,
        region: str = "us-east-1",
        account: str = "123456789012",
        schedules: list[Schedule] | None = None,
    ) -> None:
        self.region, self.account = region, account
        self.pools = {spec.name: FunctionPool(spec, region, account) for spec in functions}
        self.schedules = list(schedules or [])
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _make_handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    def replace_functions(self, functions: list[FunctionSpec]) -> None:
        """Serve `functions` from now on, on the same endpoint; the workers of the functions served
        so far stop (a call they are running still gets its answer). Schedules already started
        keep their function's old pool."""
        pools = {spec.name: FunctionPool(spec, self.region, self.account) for spec in functions}
        old, self.pools = self.pools, pools
        for pool in old.values():
            pool.close()

    def start_schedules(self) -> None:
        """One daemon thread per rule; the first run comes one period after start, as in AWS."""
        for schedule in self.schedules:
            if schedule.function not in self.pools:
                raise ValueError(f"schedule targets unknown function {schedule.function!r}")
            threading.Thread(
                target=self._run_schedule, args=(schedule,), daemon=True, name=f"schedule-{schedule.function}"
            ).start()

    def _run_schedule(self, schedule: Schedule) -> None:
        pool = self.pools[schedule.function]
        while not self._stopping.wait(schedule.rate_seconds):
            event = scheduled_event(self.region, self.account, f"{schedule.function}-schedule")
            pool.invoke(json.dumps(event), str(uuid.uuid4()))  # failures show in the function's log

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def resolve(self, name: str) -> FunctionPool | None:
        """The pool of a FunctionName (name, full or partial ARN, with or without a qualifier)."""
        return self.pools.get(split_function_name(name)[0])

    def start(self) -> LambdaEmulator:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": _SHUTDOWN_POLL_SECONDS}, daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever(poll_interval=_SHUTDOWN_POLL_SECONDS)

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        for pool in self.pools.values():
            pool.close()


class _Handler(BaseHTTPRequestHandler):
    """Lambda's Invoke (and the emulator's health check) for the emulator of `_make_handler`."""

    emulator: LambdaEmulator
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes (see the interpreter's server)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        sys.stderr.write("lambda-emulator: " + (format % args) + "\n")

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, error_type: str, message: str, request_id: str) -> None:
        body = json.dumps({"Type": "User", "message": message}).encode()
        self._send(status, body, {"x-amzn-ErrorType": error_type, "x-amzn-RequestId": request_id})

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if self.path == HEALTH_PATH:
            self._send(200, json.dumps({"functions": sorted(self.emulator.pools)}).encode())
        else:
            self._error(404, "UnknownOperationException", "Unknown operation", str(uuid.uuid4()))

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        # Every request gets an answer: whatever breaks while handling it becomes
        # a structured ServiceException, never a closed connection.
        request_id = str(uuid.uuid4())
        try:
            self._post(request_id)
        except Exception as exc:  # noqa: BLE001 - the emulator's last line of defence
            self.log_message("request %s failed: %s", request_id, type(exc).__name__)
            try:
                self._error(500, "ServiceException", f"internal error ({type(exc).__name__})", request_id)
            except OSError:
                pass  # the client is gone

    def _post(self, request_id: str) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self._error(400, "InvalidRequestContentException", "Invalid Content-Length", request_id)
            return
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        if not (path.startswith(_INVOKE_PREFIX) and path.endswith(_INVOKE_SUFFIX)):
            self._error(404, "UnknownOperationException", "Unknown operation", request_id)
            return
        name = unquote(path[len(_INVOKE_PREFIX) : -len(_INVOKE_SUFFIX)])
        function, qualifier = split_function_name(name)
        query = parse_qs(self.path.split("?", 1)[1]) if "?" in self.path else {}
        given: str | None = query["Qualifier"][0] if query.get("Qualifier") else None
        if given is not None and qualifier is not None and given != qualifier:
            # Two qualifiers that disagree: refused, never one of them guessed.
            message = "The derived qualifier from the function name does not match the specified qualifier."
            self._error(400, "InvalidParameterValueException", message, request_id)
            return
        qualifier = qualifier or given
        pool = self.emulator.pools.get(function)
        if pool is None or not pool.serves(qualifier):
            arn = f"arn:aws:lambda:{self.emulator.region}:{self.emulator.account}:function:{function}"
            arn = f"{arn}:{qualifier}" if qualifier else arn
            self._error(404, "ResourceNotFoundException", f"Function not found: {arn}", request_id)
            return
        self._deliver(pool, qualifier, raw, request_id)

    def _deliver(self, pool: FunctionPool, qualifier: str | None, raw: bytes, request_id: str) -> None:
        """The payload checked as Lambda checks it, then invoked as the invocation type asks."""
        if len(raw) > MAX_PAYLOAD_BYTES:
            self._error(
                413, "RequestTooLargeException", "Request must be smaller than 6291456 bytes", request_id
            )
            return
        try:
            payload = raw.decode("utf-8")
            if payload:
                json.loads(payload)
        except (UnicodeDecodeError, ValueError):
            self._error(
                400,
                "InvalidRequestContentException",
                "Could not parse request body into json",
                request_id,
            )
            return
        except RecursionError:
            # Valid JSON nested deeper than Python's parser goes: Lambda accepts the request
            # and the Python runtime fails to unmarshal the event; answer what it answers.
            body = json.dumps(
                {
                    "errorMessage": "Unable to unmarshal input: maximum recursion depth exceeded",
                    "errorType": "Runtime.UnmarshalError",
                    "requestId": request_id,
                    "stackTrace": [],
                }
            )
            headers = {"x-amzn-RequestId": request_id, "X-Amz-Function-Error": "Unhandled"}
            self._send(200, body.encode("utf-8"), headers)
            return
        invocation_type = self.headers.get("X-Amz-Invocation-Type", "RequestResponse")
        if invocation_type == "DryRun":
            self._send(204, b"", {"x-amzn-RequestId": request_id})
            return
        if invocation_type == "Event":
            threading.Thread(target=pool.invoke, args=(payload, request_id, qualifier), daemon=True).start()
            self._send(202, b"", {"x-amzn-RequestId": request_id})
            return
        ok, body = pool.invoke(payload, request_id, qualifier)
        # every alias points to $LATEST: the version that ran
        headers = {"x-amzn-RequestId": request_id, "X-Amz-Executed-Version": LATEST}
        if not ok:
            headers["X-Amz-Function-Error"] = "Unhandled"
        self._send(200, body.encode("utf-8"), headers)


def _make_handler(emulator: LambdaEmulator) -> type[BaseHTTPRequestHandler]:
    return type("Handler", (_Handler,), {"emulator": emulator})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="local Lambda Invoke endpoint")
    parser.add_argument("--config", required=True, help="JSON: {region, account, functions: [FunctionSpec]}")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    config = json.loads(Path(args.config).read_text())
    emulator = LambdaEmulator(
        [FunctionSpec.from_dict(f) for f in config["functions"]],
        port=args.port,
        region=config.get("region", "us-east-1"),
        account=config.get("account", "123456789012"),
        schedules=[Schedule.from_dict(s) for s in config.get("schedules", [])],
    )
    emulator.start_schedules()

    def _stop(signum: int, frame: Any) -> None:
        threading.Thread(target=emulator.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    print(json.dumps({"endpoint": emulator.endpoint}), flush=True)
    try:
        emulator.serve_forever()
    finally:
        for pool in emulator.pools.values():
            pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
