"""`python -m egress_proxy.ca --confdir DIR`: make the proxy's CA in DIR (once) the way mitmproxy
makes it, and print the path of its certificate.

DIR (mode 0700) keeps `mitmproxy-ca.pem`, the key with the certificate, which never leaves it;
`mitmproxy-ca-cert.pem` is the certificate alone, what sessions trust. The local stack runs this
before it starts anything, so every part is given the certificate's path at its start.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mitmproxy import certs
from mitmproxy.options import CONF_BASENAME, KEY_SIZE

CA_CERT_FILE = f"{CONF_BASENAME}-ca-cert.pem"


def ensure_ca(confdir: str) -> Path:
    directory = Path(confdir)
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    certs.CertStore.from_store(path=directory, basename=CONF_BASENAME, key_size=KEY_SIZE)
    return directory / CA_CERT_FILE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m egress_proxy.ca", description=__doc__.splitlines()[0])
    parser.add_argument("--confdir", required=True)
    opts = parser.parse_args(argv)
    print(ensure_ca(opts.confdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
