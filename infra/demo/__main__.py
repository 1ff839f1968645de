"""`python -m infra.demo` (what `make demo` runs)."""

import sys

from infra.demo.run import main

if __name__ == "__main__":
    sys.exit(main())
