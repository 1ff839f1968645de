"""Every name of the system, declared once, grouped by kind, one module a kind: the project's name
and id shapes (`ids`), actions, environments, DynamoDB tables with their item attributes, key
values and indexes (`tables`), S3 objects, SSM parameters, secrets, the egress proxy's names
(`proxy`), Lambda functions, interpreters and their roles, environment variables (`env_vars`),
metrics, alarms, stacks and their outputs, response fields and failure reasons (`responses`),
reaper hooks, the local stack's. No name is bound twice, in its module or across them.

Callers read every name from this package (`from sandbox_common import naming as n`; `n.TURNS`),
never from the module that declares it: the modules are where a name is written, the package is
where it is read. Imported by the CDK code (infra/cdk), the Lambdas, the local stack, the CLI and
the tests, so a name changes in one place only. Limits and durations are `sandbox_common.limits`,
the cap dimensions `sandbox_common.dimensions`. Stdlib only.
"""

from __future__ import annotations

from .actions import *
from .alarms import *
from .env_vars import *
from .environments import *
from .functions import *
from .ids import *
from .interpreters import *
from .local import *
from .metrics import *
from .parameters import *
from .proxy import *
from .reaper import *
from .responses import *
from .s3 import *
from .secrets import *
from .stacks import *
from .tables import *
