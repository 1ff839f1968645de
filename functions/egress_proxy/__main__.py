"""`python -m egress_proxy --stage S --confdir DIR --egress-table T ...` (see config.py).

Runs mitmproxy (regular proxy mode, upstream connections made lazily, per allowed request) with the
egress addon and only the engine's own addons. Prints one JSON line `{"endpoint": "HOST:PORT",
"pid": N, "ca_cert": PATH}` once it accepts connections, then serves until SIGTERM/SIGINT, flushing
its counters on the way out.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mitmproxy import options
from mitmproxy.addons import core, disable_h2c, next_layer, proxyserver, tlsconfig
from mitmproxy.master import Master
from sandbox_common import naming as n

from .addon import (
    EgressAddon,
    answer_trailers,
    bound_buffered_responses,
    bound_request_heads,
    skip_informational_responses,
    withhold_upstream_bytes_in_errors,
)
from .config import ProxyConfig, from_args
from .engine import Engine
from .store import EgressStore

CA_FILE = "mitmproxy-ca.pem"  # key + certificate: never leaves the proxy's directory
CA_CERT_FILE = "mitmproxy-ca-cert.pem"  # the certificate alone: what sessions trust
UPSTREAM_TRUST_FILE = "upstream-trust.pem"
STORE_THREADS = 32  # store.py's clients keep as many connections each


class Ready:
    """Says where the proxy listens once it does (or exits when it could not listen)."""

    def __init__(self, config: ProxyConfig, master: Master) -> None:
        self.config = config
        self.master = master
        self.failed = False

    def running(self) -> None:
        server: Any = self.master.addons.get("proxyserver")
        addresses = server.listen_addrs() if server is not None else []
        if not addresses:
            print("egress proxy: could not listen (see the log above)", file=sys.stderr, flush=True)
            self.failed = True
            self.master.shutdown()
            return
        host, port = addresses[0][0], addresses[0][1]
        line = {
            "endpoint": f"{host}:{port}",
            "pid": os.getpid(),
            "ca_cert": str(Path(self.config.confdir) / CA_CERT_FILE),
        }
        print(json.dumps(line), flush=True)


def upstream_trust(config: ProxyConfig) -> str | None:
    """The default trust (certifi, as mitmproxy uses) plus the routed servers' CA, or None when
    there is no route CA (mitmproxy's default then)."""
    if not config.route_ca:
        return None
    import certifi

    bundle = Path(config.confdir) / UPSTREAM_TRUST_FILE
    extra = Path(config.route_ca).read_text(encoding="ascii")
    if "PRIVATE KEY" in extra:
        raise ValueError(f"--route-ca {config.route_ca} holds a private key; give the certificate only")
    bundle.write_text(Path(certifi.where()).read_text(encoding="ascii") + "\n" + extra, encoding="ascii")
    return str(bundle)


def ca_from_secrets(config: ProxyConfig) -> None:
    """Write the stage's CA (Secrets Manager) into the CA directory, as mitmproxy reads it."""
    from sandbox_common import aws

    client = aws.client("secretsmanager")
    cert = client.get_secret_value(SecretId=n.egress_ca_cert_secret_name(config.stage))["SecretString"]
    key = client.get_secret_value(SecretId=n.egress_ca_key_secret_name(config.stage))["SecretString"]
    directory = Path(config.confdir)
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    private = directory / CA_FILE
    private.touch(mode=0o600, exist_ok=True)
    private.write_text(key.strip() + "\n" + cert.strip() + "\n", encoding="ascii")
    (directory / CA_CERT_FILE).write_text(cert.strip() + "\n", encoding="ascii")


async def serve(config: ProxyConfig) -> int:
    Path(config.confdir).mkdir(parents=True, exist_ok=True)
    os.chmod(config.confdir, 0o700)
    bound_request_heads()
    bound_buffered_responses()
    answer_trailers()
    withhold_upstream_bytes_in_errors()
    skip_informational_responses()
    opts = options.Options(
        listen_host=config.listen_host,
        listen_port=config.listen_port,
        confdir=config.confdir,
    )
    master = Master(opts)
    store = EgressStore(
        stage=config.stage,
        egress_table=config.egress_table,
        counters_table=config.counters_table,
        tenants_table=config.tenants_table,
        cache_seconds=config.cache_seconds,
        codeartifact=config.index.codeartifact if config.index else None,
    )
    ready = Ready(config, master)
    # The egress addon first: it sees every hook before the engine's own addons.
    master.addons.add(
        EgressAddon(Engine(config, store)),
        core.Core(),
        proxyserver.Proxyserver(),
        next_layer.NextLayer(),
        tlsconfig.TlsConfig(),
        disable_h2c.DisableH2C(),
        ready,
    )
    opts.update(
        mode=["regular"],
        # upstream connections only for requests the addon allowed, to the address it checked
        connection_strategy="lazy",
        upstream_cert=False,
        http3=False,
        rawtcp=False,
        tcp_timeout=config.idle_timeout,
        ssl_insecure=False,  # upstream TLS is always verified
        ssl_verify_upstream_trusted_ca=upstream_trust(config),
        # applied only to the responses the addon buffers (bound_buffered_responses)
        body_size_limit=str(config.max_scrubbed_body),
    )
    loop = asyncio.get_running_loop()
    # the store's blocking reads and writes run here (asyncio.to_thread), never on the loop; as
    # many threads as the store's clients have connections
    loop.set_default_executor(
        ThreadPoolExecutor(max_workers=STORE_THREADS, thread_name_prefix="egress-store")
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, master.shutdown)
    await master.run()
    return 1 if ready.failed else 0


def main(argv: list[str] | None = None) -> int:
    config = from_args(argv)
    # one JSON line per event on stdout (Powertools' logger and EMF metrics), written as it happens;
    # the engine's own log (mitmproxy's) at WARNING on stderr
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    engine_log = logging.getLogger("mitmproxy")
    engine_log.setLevel(logging.WARNING)
    engine_log.addHandler(logging.StreamHandler(sys.stderr))
    if config.ca_from_secrets:
        ca_from_secrets(config)
    try:
        return asyncio.run(serve(config))
    except (OSError, ValueError) as exc:
        print(f"egress proxy: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
