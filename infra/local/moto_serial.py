"""moto over HTTP, one request at a time.

Measured here: moto's threaded server applies concurrent TransactWriteItems / conditional writes
without isolation (4 admitted at cap 3, lost updates), which real DynamoDB never does. Serving one
request at a time gives each write the atomicity DynamoDB guarantees, while callers still race on
the client side — so race tests prove our conditional logic, not moto's locking. Used by the test
suite's shared `moto_server` fixture and by the local stack.
"""

from __future__ import annotations

import argparse
import json
import sys

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server


class _NoDelayHandler(MotoRequestHandler):
    # TCP_NODELAY: a response is written in several small writes; with Nagle's algorithm the
    # later ones wait for the client's delayed ACK (measured: a GetItem 5.7 ms -> 3.8 ms).
    disable_nagle_algorithm = True


class SerialMotoServer(ThreadedMotoServer):
    def _server_entry(self) -> None:
        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server(self._ip_address, self._port, app, False, request_handler=_NoDelayHandler)
        self._server_ready_event.set()
        self._server.serve_forever()

    def wait(self) -> None:
        """Serve until the process is killed (the server thread `start` began)."""
        assert self._thread is not None  # set by start()
        self._thread.join()

    @property
    def endpoint(self) -> str:
        host, port = self.get_host_and_port()
        return f"http://{host}:{port}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.local.moto_serial")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server = SerialMotoServer(ip_address="127.0.0.1", port=args.port, verbose=False)
    server.start()
    print(json.dumps({"endpoint": server.endpoint}), flush=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
