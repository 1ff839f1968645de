"""The local stack's package index: the simple repository API (PEP 503) over HTTPS, serving a few
tiny pure-Python wheels the stack makes at `local up`, laid out as CodeArtifact lays out its
repository's files:

    /simple/{project}/                       the project's page: one link per file
    /simple/{project}/{version}/{filename}   the file

Sessions never reach it directly: their pip asks the egress proxy for the stage's index host
(`naming.LOCAL_PACKAGE_INDEX_HOST`), the proxy checks the path against the policy's `packages` and
sends what it allows here (a route), verifying this server's certificate against the local stack's
own CA. `python -m infra.local.package_index --port N --dir DIR --cert PEM --key PEM` prints one
JSON line once it listens, then serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import io
import json
import os
import re
import signal
import ssl
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# (project, version, module source): what the local index offers. Two versions of one project, so a
# pinned `packages` entry has something to choose between.
WHEELS: tuple[tuple[str, str, str], ...] = (
    ("sandbox-hello", "1.0.0", 'VERSION = "1.0.0"\n\n\ndef greet(name):\n    return f"hello, {name}"\n'),
    (
        "sandbox-hello",
        "1.1.0",
        'VERSION = "1.1.0"\n\n\ndef greet(name):\n    return f"hello again, {name}"\n',
    ),
    ("sandbox-colors", "0.1.0", 'VERSION = "0.1.0"\nCOLORS = ("red", "green", "blue")\n'),
    ("sandbox-unlisted", "1.0.0", 'VERSION = "1.0.0"\n'),
)
_EPOCH = (2026, 1, 1, 0, 0, 0)  # fixed timestamps: the same wheel bytes at every `local up`
_PROJECT_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$")


def _dist(project: str) -> str:
    return project.replace("-", "_")


def wheel_bytes(project: str, version: str, source: str) -> tuple[str, bytes]:
    """(file name, bytes) of a py3-none-any wheel holding one module."""
    dist = _dist(project)
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{dist}/__init__.py": source.encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: sandbox-local\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record_lines = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record_lines.append(f"{name},sha256={digest},{len(data)}")
    record_lines.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record_lines) + "\n").encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            entry = zipfile.ZipInfo(name, date_time=_EPOCH)
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, data)
    return f"{dist}-{version}-py3-none-any.whl", out.getvalue()


def build(directory: Path) -> dict[str, list[tuple[str, str]]]:
    """Write the wheels under `directory/{project}/{version}/`; project -> [(version, file name)]."""
    projects: dict[str, list[tuple[str, str]]] = {}
    for project, version, source in WHEELS:
        filename, data = wheel_bytes(project, version, source)
        target = directory / project / version
        target.mkdir(parents=True, exist_ok=True)
        (target / filename).write_bytes(data)
        projects.setdefault(project, []).append((version, filename))
    return projects


class IndexHandler(BaseHTTPRequestHandler):
    root: Path
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - stdlib's name
        path = self.path.split("?", 1)[0]
        parts = path.split("/")
        # "", "simple", project, "" | version, filename
        if len(parts) == 4 and parts[1] == "simple" and parts[3] == "" and _PROJECT_RE.match(parts[2]):
            self._page(parts[2])
        elif len(parts) == 5 and parts[1] == "simple" and _PROJECT_RE.match(parts[2]):
            self._file(parts[2], parts[3], parts[4])
        else:
            self._send(404, b"not found", "text/plain")

    def _page(self, project: str) -> None:
        folder = self.root / project
        if not folder.is_dir():
            self._send(404, b"not found", "text/plain")
            return
        links = []
        for version_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
            for file in sorted(version_dir.iterdir()):
                digest = hashlib.sha256(file.read_bytes()).hexdigest()
                href = html.escape(f"{version_dir.name}/{file.name}#sha256={digest}")
                links.append(f'<a href="{href}">{html.escape(file.name)}</a><br/>')
        body = (
            "<!DOCTYPE html><html><head><title>Links for "
            + html.escape(project)
            + "</title></head><body>\n"
            + "\n".join(links)
            + "\n</body></html>\n"
        )
        self._send(200, body.encode(), "text/html")

    def _file(self, project: str, version: str, filename: str) -> None:
        if "/" in version or ".." in version or "/" in filename or ".." in filename:
            self._send(404, b"not found", "text/plain")
            return
        file = self.root / project / version / filename
        if not file.is_file():
            self._send(404, b"not found", "text/plain")
            return
        self._send(200, file.read_bytes(), "application/octet-stream")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.local.package_index")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    opts = parser.parse_args(argv)
    handler = type("Handler", (IndexHandler,), {"root": Path(opts.dir)})
    server = ThreadingHTTPServer(("127.0.0.1", opts.port), handler)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(opts.cert, opts.key)
    # the handshake in each connection's own thread, not in the accepting one
    server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(
        json.dumps({"endpoint": f"https://127.0.0.1:{server.server_address[1]}", "pid": os.getpid()}),
        flush=True,
    )
    done.wait()
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
