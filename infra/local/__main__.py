"""`python -m infra.local up|down|status`: the same as `sandboxctl local ...`."""

from __future__ import annotations

import sys

from infra.sandboxctl.main import main

if __name__ == "__main__":
    sys.exit(main(["local", *sys.argv[1:]]))
