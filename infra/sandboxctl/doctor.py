"""`sandboxctl doctor --stage NAME`: can this account and region take the stage? Run before a
deploy (and after one: it reads, never writes).

One line per check, `PASS`, `FAIL` or `WARN`; exit 1 when any check fails, naming the failed
checks. The checks:

- `credentials`: the boto3 default chain reaches STS (the account everything below is about);
- `agentcore-region`: the region offers Amazon Bedrock AgentCore, from AWS's public
  global-infrastructure parameters in SSM (`/aws/service/global-infrastructure/services/
  bedrock-agentcore/regions/<region>`, queried in us-east-1, one of the regions that serves them);
- `cdk-bootstrap`: the CDK bootstrap of the region is there and new enough for the stage's
  templates (`/cdk-bootstrap/<qualifier>/version` ≥ 6, the templates' own CheckBootstrapVersion);
- `iam-roles`: Service Quotas' "Roles per account" (iam L-FE177D64) minus the roles in use that
  are not the stage's own leaves room for every role the stage creates (`stage_roles`);
- `lambda-concurrency`: "Concurrent executions" (lambda L-B99A9384) holds the stage's busiest
  moment: every live session's call (the `global_sessions` cap) in dispatch plus its quota check,
  and the reaper and backstop beside them;
- `agentcore-sessions`: the AgentCore Code Interpreter concurrent-session quota (found by name in
  Service Quotas, service `bedrock-agentcore`) holds the `global_sessions` cap; WARN when Service
  Quotas does not list it;
- `agent-principals`: every agent principal of this account exists (Lambda refuses a resource
  policy naming a role that does not exist); principals of other accounts cannot be checked here.

Service Quotas is read, never the documented defaults: an account whose quota was raised (or
lowered) is judged by its own value.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sandbox_common import aws
from sandbox_common import naming as n

from infra.cdk.config import ROLE_ARN_RE, ConfigError, StageConfig, build_config
from infra.cdk.constructs.definitions import stage_roles
from infra.sandboxctl.errors import CtlError

PASS, FAIL, WARN = "PASS", "FAIL", "WARN"
AGENTCORE_SERVICE = "bedrock-agentcore"
AGENTCORE_REGIONS_PATH = f"/aws/service/global-infrastructure/services/{AGENTCORE_SERVICE}/regions"
GLOBAL_INFRASTRUCTURE_REGION = "us-east-1"
BOOTSTRAP_QUALIFIER = "hnb659fds"  # the CDK default; cdk.json sets none
MIN_BOOTSTRAP_VERSION = 6
IAM_ROLES_QUOTA = ("iam", "L-FE177D64")  # Roles per account (a global quota: read in us-east-1)
LAMBDA_CONCURRENCY_QUOTA = ("lambda", "L-B99A9384")  # Concurrent executions
# Beside the calls of live sessions: the reaper's run, the backstop's log batches, other calls.
LAMBDA_CONCURRENCY_HEADROOM = 10
_SESSION_QUOTA_NAME = re.compile(r"code\s*interpreter.*session|session.*code\s*interpreter", re.IGNORECASE)
_RATE_QUOTA_NAME = re.compile(r"rate|per second|tps|requests", re.IGNORECASE)

Clients = Callable[[str, str], Any]  # (service, region) -> boto3 client


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str

    def line(self) -> str:
        return f"{self.status}  {self.name}: {self.detail}"


@dataclass
class Report:
    stage: str
    region: str | None
    account: str | None = None
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if c.status == FAIL]

    def human(self) -> str:
        head = f"doctor: stage {self.stage}, account {self.account or '?'}, region {self.region or '?'}"
        tail = "all checks passed" if self.ok else f"failed: {', '.join(self.failed)}"
        return "\n".join([head, *(c.line() for c in self.checks), f"doctor: {tail}"])

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "account": self.account,
            "region": self.region,
            "ok": self.ok,
            "failed": self.failed,
            "checks": [{"name": c.name, "status": c.status, "detail": c.detail} for c in self.checks],
        }


def _default_clients(service: str, region: str) -> Any:
    return aws.new_client(service, region_name=region)


def run(stage: str, *, region: str | None = None, clients: Clients = _default_clients) -> Report:
    if stage == "local":
        raise CtlError("the local stage needs no AWS account: `sandboxctl local up` starts it")
    try:
        config = build_config(stage)
    except ConfigError as exc:
        raise CtlError(str(exc)) from None
    region = region or config.region or _session_region()
    report = Report(stage=stage, region=region)
    if not region:
        report.checks.append(Check("region", FAIL, "no region: pass --region, or set AWS_REGION"))
        return report
    try:
        report.account = str(clients("sts", region).get_caller_identity()["Account"])
    except Exception as exc:  # noqa: BLE001 - every failure is a line of the report
        report.checks.append(Check("credentials", FAIL, f"no AWS credentials for {region} ({_cause(exc)})"))
        return report
    report.checks.append(Check("credentials", PASS, f"account {report.account}"))
    checks: list[tuple[str, Callable[..., Check], tuple[Any, ...]]] = [
        ("agentcore-region", _agentcore_region, ()),
        ("cdk-bootstrap", _bootstrap, ()),
        ("iam-roles", _iam_roles, ()),
        ("lambda-concurrency", _lambda_concurrency, ()),
        ("agentcore-sessions", _agentcore_sessions, ()),
        ("agent-principals", _agent_principals, (report.account,)),
    ]
    for name, check, extra in checks:
        try:
            report.checks.append(check(name, config, region, clients, *extra))
        except Exception as exc:  # noqa: BLE001 - a check that cannot run fails, naming why
            report.checks.append(Check(name, FAIL, f"could not check ({_cause(exc)})"))
    return report


def _cause(exc: Exception) -> str:
    code = getattr(exc, "response", {}).get("Error", {}).get("Code")
    return str(code) if code else f"{type(exc).__name__}: {exc}"


def _session_region() -> str | None:
    import boto3

    region: str | None = boto3.session.Session().region_name
    return region


def _error_code(exc: Exception) -> str | None:
    code = getattr(exc, "response", {}).get("Error", {}).get("Code")
    return None if code is None else str(code)


# --- the checks -----------------------------------------------------------------------------------
def _agentcore_region(name: str, config: StageConfig, region: str, clients: Clients) -> Check:
    ssm = clients("ssm", GLOBAL_INFRASTRUCTURE_REGION)
    try:
        ssm.get_parameter(Name=f"{AGENTCORE_REGIONS_PATH}/{region}")
    except Exception as exc:
        if _error_code(exc) == "ParameterNotFound":
            return Check(
                name, FAIL, f"Amazon Bedrock AgentCore (Code Interpreter) is not offered in {region}"
            )
        raise
    return Check(name, PASS, f"Amazon Bedrock AgentCore is offered in {region}")


def _bootstrap(name: str, config: StageConfig, region: str, clients: Clients) -> Check:
    parameter = f"/cdk-bootstrap/{BOOTSTRAP_QUALIFIER}/version"
    try:
        raw = clients("ssm", region).get_parameter(Name=parameter)["Parameter"]["Value"]
    except Exception as exc:
        if _error_code(exc) == "ParameterNotFound":
            return Check(name, FAIL, f"not bootstrapped: run `npx cdk bootstrap aws://ACCOUNT/{region}`")
        raise
    version = int(raw) if str(raw).isdigit() else 0
    if version < MIN_BOOTSTRAP_VERSION:
        return Check(
            name, FAIL, f"bootstrap version {raw} < {MIN_BOOTSTRAP_VERSION}: run `npx cdk bootstrap` again"
        )
    return Check(name, PASS, f"bootstrap version {version} ({parameter})")


def _quota(clients: Clients, region: str, service: str, code: str) -> float | None:
    """A quota's value for this account from Service Quotas (None when it does not list it)."""
    try:
        answer = clients("service-quotas", region).get_service_quota(ServiceCode=service, QuotaCode=code)
    except Exception as exc:
        if _error_code(exc) == "NoSuchResourceException":
            return None
        raise
    return float(answer["Quota"]["Value"])


def _iam_roles(name: str, config: StageConfig, region: str, clients: Clients) -> Check:
    need = stage_roles(config)
    iam = clients("iam", GLOBAL_INFRASTRUCTURE_REGION)
    summary = iam.get_account_summary()["SummaryMap"]
    quota = _quota(clients, GLOBAL_INFRASTRUCTURE_REGION, *IAM_ROLES_QUOTA)
    source = "Service Quotas"
    if quota is None:  # Service Quotas does not list it: IAM's own figure
        quota, source = float(summary["RolesQuota"]), "IAM account summary"
    ours = _stage_role_count(iam, config.name)
    free = int(quota) - (int(summary["Roles"]) - ours)
    detail = (
        f"the stage needs {need} roles; {int(summary['Roles'])} of {int(quota)} in use ({ours} the stage's), "
        f"{free} available ({source}, iam {IAM_ROLES_QUOTA[1]})"
    )
    if free < need:
        return Check(name, FAIL, f"{detail}: raise 'Roles per account'")
    return Check(name, PASS, detail)


def _stage_role_count(iam: Any, stage: str) -> int:
    """Roles this stage already created (a redeploy replaces them, it does not add to them)."""
    prefix = f"{n.PROJECT}-{stage}-"
    paginator = iam.get_paginator("list_roles")
    return sum(
        1 for page in paginator.paginate() for role in page["Roles"] if role["RoleName"].startswith(prefix)
    )


def lambda_concurrency_needed(config: StageConfig) -> int:
    """A live session's call holds a dispatch invocation and, while its quota is checked, a
    quota-check invocation: 2 per session of the `global_sessions` cap, plus headroom."""
    return 2 * config.caps.of("global_sessions") + LAMBDA_CONCURRENCY_HEADROOM


def _lambda_concurrency(name: str, config: StageConfig, region: str, clients: Clients) -> Check:
    need = lambda_concurrency_needed(config)
    quota = _quota(clients, region, *LAMBDA_CONCURRENCY_QUOTA)
    if quota is None:
        return Check(name, WARN, f"Service Quotas does not list lambda {LAMBDA_CONCURRENCY_QUOTA[1]} here")
    sessions = config.caps.of("global_sessions")
    headroom = LAMBDA_CONCURRENCY_HEADROOM
    detail = f"the stage needs {need} (2 × global_sessions {sessions} + {headroom}); quota {int(quota)}"
    if quota < need:
        return Check(name, FAIL, f"{detail}: raise 'Concurrent executions' or lower global_sessions")
    return Check(name, PASS, detail)


def _agentcore_sessions(name: str, config: StageConfig, region: str, clients: Clients) -> Check:
    need = config.caps.of("global_sessions")
    quotas: list[dict[str, Any]] = []
    paginator = clients("service-quotas", region).get_paginator("list_service_quotas")
    try:
        for page in paginator.paginate(ServiceCode=AGENTCORE_SERVICE):
            quotas += page.get("Quotas", [])
    except Exception as exc:
        if _error_code(exc) != "NoSuchResourceException":
            raise
    found = [
        q
        for q in quotas
        if _SESSION_QUOTA_NAME.search(q.get("QuotaName", ""))
        and not _RATE_QUOTA_NAME.search(q.get("QuotaName", ""))
    ]
    if not found:
        return Check(
            name,
            WARN,
            f"Service Quotas lists no Code Interpreter session quota in {region} (the stage allows {need})",
        )
    quota = min(found, key=lambda q: float(q["Value"]))
    value = float(quota["Value"])
    detail = f"global_sessions {need}; '{quota['QuotaName']}' ({quota['QuotaCode']}) {int(value)}"
    if value < need:
        return Check(name, FAIL, f"{detail}: raise the quota or lower global_sessions")
    return Check(name, PASS, detail)


def _agent_principals(name: str, config: StageConfig, region: str, clients: Clients, account: str) -> Check:
    if not config.agents:
        return Check(name, PASS, "no agent principals configured")
    iam = clients("iam", GLOBAL_INFRASTRUCTURE_REGION)
    missing, other = [], []
    for agent in config.agents:
        match = ROLE_ARN_RE.match(agent.principal)
        assert match is not None  # validated by the config
        if match["account"] != account:
            other.append(agent.principal)
            continue
        try:
            iam.get_role(RoleName=agent.principal.rsplit("/", 1)[-1])
        except Exception as exc:
            if _error_code(exc) != "NoSuchEntity":
                raise
            missing.append(agent.principal)
    checked = len(config.agents) - len(other)
    note = f"; {len(other)} in other accounts (not checkable here)" if other else ""
    if missing:
        return Check(name, FAIL, f"no such role: {', '.join(missing)} (Lambda refuses a grant to it){note}")
    found = f"{checked} of this account found" if checked else "none of this account"
    return Check(name, PASS, f"{found}{note}")
