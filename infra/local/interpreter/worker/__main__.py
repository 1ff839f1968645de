"""The worker's entry point, run as `python -I <this directory>` (inside the sandbox, the read-only
bind of this package).

Python put this directory first on `sys.path` to find this file; it is taken off again before
anything else runs, so user code, which shares this process, cannot import the worker's modules
by their short names (nor have its own `frames.py` shadowed by them). The package is then loaded
from this directory under a private name, its modules importing each other relatively, as they do
when the server imports `infra.local.interpreter.worker.frames`.
"""

import importlib
import importlib.util
import os
import sys

_PACKAGE = "_lci_worker"


def _load_package() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        del sys.path[0]
    spec = importlib.util.spec_from_file_location(
        _PACKAGE, os.path.join(here, "__init__.py"), submodule_search_locations=[here]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[_PACKAGE] = package
    spec.loader.exec_module(package)


if __name__ == "__main__":
    _load_package()
    sys.exit(importlib.import_module(f"{_PACKAGE}.kernel").main())
