"""Re-export of the one naming module, so infra code reads `from infra.naming import ...`.

The source of truth lives in the common layer (layers/common/python/sandbox_common/naming.py)
because the Lambdas need the same names at run time.
"""

from sandbox_common.naming import *  # noqa: F401,F403
from sandbox_common.naming import ENVIRONMENTS, NETWORK_MODE, interpreter_name  # noqa: F401
